#!/usr/bin/env bash
# bench/train.sh — the demo training configuration on an emulated v4-8 slice (784-256-128-10,
# batch 256, SGD momentum 0.9, lr 0.1, 1 warmup epoch + cosine, 15 epochs, cache on) with the
# input pipeline's prefetch on (4 batches) and off (and off without the cache), next to the
# peers measured in the same run: the same MLP in plain fp32 C + OpenBLAS
# (build/bench/train_peer), and in PyTorch and numpy (bench/train_py_peers.py, when Debian's
# python3-torch / python3-numpy are installed; 2 threads, OMP_WAIT_POLICY=PASSIVE). Prints
# accuracy, training wall time, device busy fraction (1 - input wait) and the time ratios.
# TF_BENCH_TRAIN_EPOCHS overrides the epochs (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${TPUFLOW_BIN:-$PWD/$BUILD/tpuflow}
EPOCHS=${TF_BENCH_TRAIN_EPOCHS:-15}
work=$(mktemp -d /tmp/tpuflow-bench-train.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$BIN" --home "$work/home" data prep >/dev/null
run() { # $1 = prefetch, $2 = --cache or nothing
  "$BIN" --home "$work/home" --json train --accelerator v4-8 --epochs "$EPOCHS" --batch 256 \
    --optimizer sgd --lr 0.1 --momentum 0.9 --warmup-epochs 1 --schedule cosine $2 \
    --prefetch "$1" --no-ckpt --export "$work/bundle-$1" 2>/dev/null
}
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]])' "$1" "$2"; }

on=$(run 4 --cache)
off=$(run 0 --cache)
bare=$(run 0 "")
peer=""
if [[ -x $BUILD/bench/train_peer ]]; then
  peer=$(TF_BENCH_PEER_EPOCHS=$EPOCHS OPENBLAS_NUM_THREADS=2 "$BUILD/bench/train_peer")
fi
# Debian's interpreter: python3-torch and python3-numpy install into its dist-packages
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
pypeers=$(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \
  "$py" bench/train_py_peers.py "$EPOCHS" torch numpy 2>/dev/null || true)
python3 - "$on" "$off" "$bare" "$peer" "$EPOCHS" "$pypeers" <<'PY'
import json, sys
on, off, bare = (json.loads(a) for a in sys.argv[1:4])
peer = json.loads(sys.argv[4]) if sys.argv[4] else None
py = [json.loads(l) for l in sys.argv[6].splitlines() if l.strip()]
print(f"training, demo config on v4-8, {sys.argv[5]} epochs:")
for name, d in (("prefetch on (4), cache", on), ("prefetch off, cache", off),
                ("prefetch off, no cache", bare)):
    print(f"  {name:24s} test accuracy {d['accuracy']*100:.2f}%  train wall {d['wall_seconds']:.2f} s"
          f"  {d['examples_per_second']:.0f} ex/s  device busy {100*(1-d['input_wait']):.1f}%"
          f"  simulated device {d['device_seconds']:.3f} s  MXU util {100*d['utilization']:.1f}%")
if peer:
    print(f"  {'peer fp32 OpenBLAS':24s} test accuracy {peer['accuracy']*100:.2f}%  train wall {peer['seconds']:.2f} s")
    print(f"  ratio (emulated slice, prefetch on) / peer wall time: {on['wall_seconds']/peer['seconds']:.2f}x")
for p in py:
    if "skipped" in p:
        print(f"  peer {p['peer']}: skipped, {p['skipped']}")
        continue
    print(f"  {'peer fp32 ' + p['peer']:24s} test accuracy {p['accuracy']*100:.2f}%  train wall {p['seconds']:.2f} s"
          f"  (tpuflow wall / {p['peer']} wall: {on['wall_seconds']/p['seconds']:.2f}x)")
print("  (tpuflow's wall includes its per-epoch test evaluation; the peers' do not)")
PY
