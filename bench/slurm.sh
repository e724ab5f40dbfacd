#!/usr/bin/env bash
# What running a step on Slurm costs: a one-step pipeline whose shell step runs `true` as a
# Slurm job (`executor: slurm`), from `tpuflow run` to its end (submission, queueing, the
# job, polling, the result), beside the same trivial job submitted with plain `sbatch --wait`
# and the same pipeline with `executor: local`, all in the same run on a one-node cluster
# (scripts/slurm-start.sh). Medians of TF_BENCH_REPS runs (5), for two poll intervals.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
reps=${TF_BENCH_REPS:-5}
[[ -x $bin ]] || { echo "slurm bench: build first (make)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "slurm bench: skipped (slurmd needs root)"; exit 0; }
command -v sbatch >/dev/null || scripts/deps.sh test || exit 1

dir=$(mktemp -d /tmp/tpuflow-bench-slurm.XXXXXX)
trap '"$root/scripts/slurm-stop.sh" "$dir/slurm"; rm -rf "$dir"' EXIT
scripts/slurm-start.sh "$dir/slurm" >/dev/null || exit 1
set -a
. "$dir/slurm/slurm.env"
set +a
export TPUFLOW_SHARED_STORAGE=$dir
cd "$dir"
for ex in slurm local; do
  cat > "$ex.yaml" <<EOC
name: bench-$ex
storage: file://$dir/objects
steps:
  - name: trivial
    type: shell
    executor: $ex
    with:
      argv: ["true"]
EOC
done

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# times REPS CMD...: wall seconds of each run, one per line
times() {
  local n=$1
  shift
  for _ in $(seq 1 "$n"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || { echo "slurm bench: '$*' failed" >&2; return 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
  done
}
# one warm-up of each
"$bin" --home "$dir/h" run slurm.yaml >/dev/null 2>&1
sbatch --wait -o /dev/null --wrap true >/dev/null 2>&1

peer=$(times "$reps" sbatch --wait -o /dev/null --wrap true | median)
printf 'sbatch --wait (trivial job)                      %6.2f s  (peer)\n' "$peer"
for poll in 2 0.5; do
  t=$(TPUFLOW_SLURM_POLL=$poll times "$reps" "$bin" --home "$dir/h" run slurm.yaml | median)
  printf 'tpuflow run, executor: slurm, poll %-4s s         %6.2f s  = %.2fx sbatch --wait\n' \
    "$poll" "$t" "$(echo "$t / $peer" | bc -l)"
done
loc=$(times "$reps" "$bin" --home "$dir/h" run local.yaml | median)
printf 'tpuflow run, executor: local (no Slurm)          %6.2f s  (tpuflow'"'"'s own share)\n' "$loc"
