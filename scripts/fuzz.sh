#!/usr/bin/env bash
# make fuzz: runs every libFuzzer target (build-fuzz/fuzz_*) under ASan+UBSan for FUZZ_RUNS
# executions each (default 10^6), seeded with real inputs made by tpuflow itself.
# FUZZ_FILTER=glob picks targets. Exit status 1 when a target found a crash.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-fuzz}
RUNS=${FUZZ_RUNS:-1000000}
filter=${FUZZ_FILTER:-*}
work=$(mktemp -d /tmp/tpuflow-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Seeds: the example pipelines; TFRecord shards written by `tpuflow data prep` from a small
# CSV; a small .npy file; whole-path inputs for predict and eval (below); API requests.
mkdir -p "$work/pipeline" "$work/tfrecord" "$work/npy" "$work/api"
cp pipelines/*.yaml "$work/pipeline/"
{ echo "a,b,label"; for i in 0 1 2 3 4 5 6 7; do echo "$i.5,-$i,$((i % 2))"; done; } > "$work/t.csv"
build/tpuflow --home "$work/home" data prep --source csv --path "$work/t.csv" --shards 2 \
  --out seed/ >/dev/null 2>&1 && find "$work/home" -name '*.tfrecord*' -exec cp {} "$work/tfrecord/" \;
python3 - "$work/npy/seed.npy" <<'PY'
import struct, sys
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<6f", 1, 2, 3, 4, 5, 6))
PY

# Whole-path seeds for predict and eval (fuzz/fuzz_parts.h): a bundle trained for one step
# on that CSV, the dataset's manifest and test shard, a .npy of the model's inputs.
mkdir -p "$work/predict" "$work/eval"
sep='----8<----'
if build/tpuflow --home "$work/home" train --dataset seed/manifest.json --accelerator v5litepod-1 \
    --hidden 4 --batch 2 --max-steps 1 --no-ckpt --export "$work/bundle" >/dev/null 2>&1; then
  python3 - "$work" "$sep" <<'PY'
import glob, os, struct, sys
work, sep = sys.argv[1], sys.argv[2].encode()
rd = lambda p: open(p, "rb").read()
b = os.path.join(work, "bundle")
sig, st = rd(b + "/signature.json"), rd(b + "/model.safetensors")
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<4f", 1, 2, 3, 4)
open(work + "/predict/seed", "wb").write(sig + sep + st + sep + npy)
objs = glob.glob(work + "/home/**/seed/manifest.json", recursive=True)[0]
shard = sorted(glob.glob(os.path.dirname(objs) + "/test-*"))[0]
open(work + "/eval/seed", "wb").write(sig + sep + st + sep + rd(objs) + sep + rd(shard))
PY
else
  echo "fuzz: could not train the seed bundle; fuzz_predict and fuzz_eval start from nothing" >&2
fi

# API requests: method byte, content-type byte, path, newline, body.
printf '\x01\x00/api/v1/runs\n{"yaml": "name: x\\nsteps: []\\n", "params": {"a": 1}}' > "$work/api/run"
printf '\x01\x00/api/v1/pipelines:validate\n{"yaml": "name: y"}' > "$work/api/validate"
printf '\x00\x00/api/v1/runs/latest/steps/a/logs\n' > "$work/api/logs"
printf '\x01\x00/api/v1/models/m%%20x/aliases\n{"alias": "p", "version": 1}' > "$work/api/alias"

rc=0
for t in "$BUILD"/fuzz_*; do
  [[ -x $t && $t != *.d ]] || continue
  name=$(basename "$t"); short=${name#fuzz_}
  [[ $name == $filter ]] || continue
  mkdir -p "$work/corpus-$short"
  echo "=== $name: $RUNS runs"
  if ! "$t" -runs="$RUNS" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/" "$work/corpus-$short" "$work/$short" 2>"$work/$name.log"; then
    rc=1
    tail -40 "$work/$name.log"
    mkdir -p build-fuzz/crashes && cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* build-fuzz/crashes/ 2>/dev/null
    echo "$name: FAILED (inputs kept in build-fuzz/crashes/)"
  else
    grep -E '^stat::number_of_executed_units|^Done' "$work/$name.log" | tail -2
  fi
done
exit $rc
