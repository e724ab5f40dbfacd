#!/usr/bin/env bash
# bench/train.sh — the demo's training step as users run it, beside PyTorch in the same run.
#
# Each round runs `tpuflow run pipelines/fashion-mnist.yaml --plain --param epochs=E` with its
# home on this disk (the demo's train step: an emulated v4-8 slice, 784-256-128-10,
# batch 256, SGD momentum 0.9, lr 0.1, 1 warmup epoch + cosine, prefetch 4, a checkpoint every
# 500 steps, per-epoch test evaluation, the bundle's export) and takes the train step's
# duration as the run recorded it (`runs show --json`); then the same MLP in PyTorch (Debian's
# python3-torch; 2 threads, OMP_WAIT_POLICY=PASSIVE; its training loop only: no data loading,
# no evaluation), bench/train_py_peers.py. Rounds alternate the two, so both meet the same
# load; the figure is the median of the rounds' ratios (PyTorch time / tpuflow time, > 1 when
# tpuflow is faster) with their range. CPU times (user + system, all threads) are printed
# beside the wall times: on this shared machine a wall time depends on what else runs. After the rounds, once: numpy + OpenBLAS and plain C +
# OpenBLAS (build/bench/train_peer) on the same data, optimiser and epochs.
#   TF_BENCH_TRAIN_EPOCHS  epochs (default 15, the demo's)
#   TF_BENCH_TRAIN_ROUNDS  rounds (default 3)
#   TF_BENCH_TRAIN_VARIANTS=1  also `tpuflow train` with prefetch on/off and the cache on/off
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${TPUFLOW_BIN:-$PWD/$BUILD/tpuflow}
EPOCHS=${TF_BENCH_TRAIN_EPOCHS:-15}
ROUNDS=${TF_BENCH_TRAIN_ROUNDS:-3}
work=$(mktemp -d /tmp/tpuflow-bench-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Debian's interpreter: python3-torch and python3-numpy install into its dist-packages
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
peers() {
  OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \
    "$py" bench/train_py_peers.py "$EPOCHS" "$@" 2>/dev/null || true
}

# one round: the demo (JSON of its train step's record and the run's CPU time), then PyTorch.
# One home for all rounds, as a user rerunning the demo has: a 1-epoch run first, so the prep
# step is a cache hit in the rounds and the process's CPU time is the train step's (plus the
# evaluate, register and deploy steps, ~0.1 s); `--force train` runs the train step each round.
home="$work/home"
"$BIN" --home "$home" run pipelines/fashion-mnist.yaml --plain --param epochs=1 >/dev/null
demo() {
  /usr/bin/time -f '%U %S' -o "$work/cpu" "$BIN" --home "$home" run pipelines/fashion-mnist.yaml \
    --plain --force train --force evaluate --param "epochs=$EPOCHS" >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; return 1; }
  "$BIN" --home "$home" --json runs list --limit 1 |
    "$py" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])' >"$work/id"
  "$BIN" --home "$home" --json runs show "$(cat "$work/id")" |
    "$py" -c 'import json,sys
s=[s for s in json.load(sys.stdin)["steps"] if s["name"]=="train"][0]
u,k=open(sys.argv[1]).read().split()[-2:]
print(json.dumps({"seconds": s["duration"], "cpu_seconds": float(u)+float(k),
                  "accuracy": s["metrics"]["accuracy"], "input_wait": s["metrics"]["input_wait"]}))' "$work/cpu"
}
rounds=()
for ((i = 1; i <= ROUNDS; i++)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  t=$(demo)
  p=$(peers torch)
  rounds+=("{\"load\": $load, \"tpuflow\": $t, \"torch\": ${p:-null}}")
done
other=$(peers numpy)
cpeer=""
if [[ -x $BUILD/bench/train_peer ]]; then
  cpeer=$(TF_BENCH_PEER_EPOCHS=$EPOCHS OPENBLAS_NUM_THREADS=2 "$BUILD/bench/train_peer")
fi

variants=()
if [[ ${TF_BENCH_TRAIN_VARIANTS:-0} == 1 ]]; then
  "$BIN" --home "$work/vhome" data prep >/dev/null
  for v in "4 --cache" "0 --cache" "0"; do
    set -- $v
    variants+=("$("$BIN" --home "$work/vhome" --json train --accelerator v4-8 --epochs "$EPOCHS" \
      --batch 256 --optimizer sgd --lr 0.1 --momentum 0.9 --warmup-epochs 1 --schedule cosine \
      ${2:-} --prefetch "$1" --no-ckpt 2>/dev/null)")
  done
fi

"$py" - "$EPOCHS" "$other" "$cpeer" "${rounds[@]}" -- "${variants[@]}" <<'PY'
import json, statistics, sys
args = sys.argv[1:]
epochs, other, cpeer = args[0], args[1], args[2]
sep = args.index("--")
rounds = [json.loads(a) for a in args[3:sep]]
variants = [json.loads(a) for a in args[sep + 1:] if a]
print(f"training: the demo (tpuflow run pipelines/fashion-mnist.yaml, {epochs} epochs, v4-8), "
      f"its train step beside PyTorch (2 threads), alternating:")
ratios, cpu = [], []
for i, r in enumerate(rounds, 1):
    t, p = r["tpuflow"], r["torch"]
    line = (f"  round {i} (load {r['load']}): tpuflow train step {t['seconds']:.2f} s "
            f"(run's CPU {t['cpu_seconds']:.2f} s; test accuracy {100*t['accuracy']:.2f}%, "
            f"input wait {100*t['input_wait']:.1f}%)")
    if p and "seconds" in p:
        ratios.append(p["seconds"] / t["seconds"])
        cpu.append(p["cpu_seconds"] / t["cpu_seconds"])
        line += (f"; PyTorch {p['seconds']:.2f} s (CPU {p['cpu_seconds']:.2f} s; "
                 f"{100*p['accuracy']:.2f}%); PyTorch time / tpuflow time {ratios[-1]:.2f} "
                 f"(CPU {cpu[-1]:.2f})")
    elif p:
        line += f"; PyTorch skipped, {p['skipped']}"
    print(line)
if ratios:
    print(f"  median PyTorch time / tpuflow time: {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds; >= 1.0: tpuflow "
          f"as fast or faster); CPU time ratio {statistics.median(cpu):.2f} "
          f"({min(cpu):.2f}-{max(cpu):.2f})")
med = statistics.median(r["tpuflow"]["seconds"] for r in rounds)
for line in other.splitlines():
    p = json.loads(line)
    if "skipped" in p:
        print(f"  peer {p['peer']}: skipped, {p['skipped']}")
    else:
        print(f"  peer numpy + OpenBLAS: {p['seconds']:.2f} s ({100*p['accuracy']:.2f}%), "
              f"its time / tpuflow's median {p['seconds']/med:.2f}")
if cpeer:
    p = json.loads(cpeer)
    print(f"  peer C + OpenBLAS: {p['seconds']:.2f} s ({100*p['accuracy']:.2f}%), "
          f"its time / tpuflow's median {p['seconds']/med:.2f}")
print("  (tpuflow's step includes per-epoch evaluation, checkpoints and the export; "
      "the peers' loops do not)")
for name, d in zip(("prefetch on (4), cache", "prefetch off, cache", "prefetch off, no cache"),
                   variants):
    print(f"  tpuflow train, {name:24s} test accuracy {d['accuracy']*100:.2f}%  train wall "
          f"{d['wall_seconds']:.2f} s  {d['examples_per_second']:.0f} ex/s  device busy "
          f"{100*(1-d['input_wait']):.1f}%")
PY
