#!/usr/bin/env bash
# Integration: `tpuflow step job` (cli/cmd_step_job.c), what a Slurm job of an attempt runs on
# its compute node, run here directly with a file:// object store (no Slurm needed):
#  - --results: the program runs in a node-local directory under $TMPDIR ($TPUFLOW_WORKDIR,
#    its working directory) whatever the submitter's TPUFLOW_OUTPUTS/METRICS/RESULT/WORKDIR
#    said; the files it wrote reach the store as PREFIX + outputs, metrics, result.json (one
#    it did not write is not put), its logs as PREFIX + stdout.log and stderr.log; the
#    directory is removed at the end;
#  - a $TMPDIR that does not exist on the node: /tmp is used;
#  - a failing program: its exit status, no results put;
#  - a program that succeeded but whose results cannot be put: exit 75 (infra), said in its
#    log; one whose result file is over 1 MiB: exit 1 (error), said in its log.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
B=$PWD/$BUILD/tpuflow
[[ -x $B ]] || { echo "it_step_job: build first (make)"; exit 1; }
dir=$(mktemp -d /tmp/tpuflow-it-step-job.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "it_step_job: FAILED: $*"; exit 1; }
mkdir -p "$dir/store" "$dir/tmp"
store=file://$dir/store
obj() { cat "$dir/store/$1" 2>/dev/null; }

# ---- the results of a successful program -------------------------------------------------
TMPDIR=$dir/tmp TPUFLOW_OUTPUTS=/nonexistent/o TPUFLOW_METRICS=/nonexistent/m \
TPUFLOW_RESULT=/nonexistent/r TPUFLOW_WORKDIR=/nonexistent/w \
  "$B" step job --store "$store" --prefix a/ --results -- sh -c '
    [ "$(pwd)" = "$TPUFLOW_WORKDIR" ] || { echo "cwd $(pwd) is not $TPUFLOW_WORKDIR" >&2; exit 3; }
    case $TPUFLOW_WORKDIR in "$TMPDIR"/tpuflow-job.*/work) ;; *) echo "workdir $TPUFLOW_WORKDIR" >&2; exit 3;; esac
    echo scratch > scratch.txt
    echo greeting=hello > "$TPUFLOW_OUTPUTS"
    echo answer=42 > "$TPUFLOW_METRICS"
    echo done' > /dev/null 2> "$dir/err.txt" ||
  fail "step job --results: exit $?: $(cat "$dir/err.txt"; obj a/stderr.log)"
[[ $(obj a/outputs) == greeting=hello ]] || fail "outputs: '$(obj a/outputs)'"
[[ $(obj a/metrics) == answer=42 ]] || fail "metrics: '$(obj a/metrics)'"
[[ ! -e $dir/store/a/result.json ]] || fail "a result.json the program did not write was put"
[[ $(obj a/stdout.log) == done ]] || fail "stdout.log: '$(obj a/stdout.log)'"
grep -q '^==> exit 0 <==' "$dir/store/a/stderr.log" || fail "stderr.log: $(obj a/stderr.log)"
[[ -z $(ls -A "$dir/tmp") ]] || fail "the job's directory was left behind: $(ls -A "$dir/tmp")"
echo "it_step_job: results put in the store, the node-local directory removed"

# ---- a TMPDIR the node does not have: /tmp ------------------------------------------------
TMPDIR=$dir/no-such-dir "$B" step job --store "$store" --prefix b/ --results -- \
  sh -c 'case $PWD in /tmp/tpuflow-job.*/work) ;; *) exit 3;; esac
         printf "{\"outputs\": {\"k\": \"v\"}}" > "$TPUFLOW_RESULT"' 2> "$dir/err.txt" ||
  fail "step job with a missing TMPDIR: $(cat "$dir/err.txt"; obj b/stderr.log)"
[[ $(obj b/result.json) == '{"outputs": {"k": "v"}}' ]] || fail "result.json: '$(obj b/result.json)'"
echo "it_step_job: a missing TMPDIR falls back to /tmp"

# ---- a failing program: its status, no results --------------------------------------------
TMPDIR=$dir/tmp "$B" step job --store "$store" --prefix c/ --results -- \
  sh -c 'echo x=1 > "$TPUFLOW_OUTPUTS"; exit 7' 2>/dev/null
rc=$?
[[ $rc == 7 ]] || fail "a failing program: exit $rc, want 7"
[[ ! -e $dir/store/c/outputs ]] || fail "a failing program's outputs were put"
[[ -e $dir/store/c/stderr.log ]] || fail "a failing program's logs were not put"
echo "it_step_job: a failing program keeps its exit status, puts no results"

# ---- results that cannot be put: 75 -------------------------------------------------------
mkdir -p "$dir/store/d"
: > "$dir/store/d/x" # d/x/ cannot be a directory of the store: every put under it fails
TMPDIR=$dir/tmp "$B" step job --store "$store" --prefix d/x/ --results -- \
  sh -c 'echo x=1 > "$TPUFLOW_OUTPUTS"' 2> "$dir/err.txt"
rc=$?
[[ $rc == 75 ]] || fail "results that cannot be put: exit $rc, want 75: $(cat "$dir/err.txt")"
grep -q 'cannot put \$TPUFLOW_OUTPUTS' "$dir/err.txt" || fail "no message: $(cat "$dir/err.txt")"
[[ -z $(ls -A "$dir/tmp") ]] || fail "the job's directory was left behind: $(ls -A "$dir/tmp")"
echo "it_step_job: results that cannot be put -> exit 75"
# ---- a result file over the cap: 1 (the program's fault), said in its log ------------------
TMPDIR=$dir/tmp "$B" step job --store "$store" --prefix e/ --results -- \
  sh -c 'head -c 1100000 /dev/zero | tr "\0" a > "$TPUFLOW_OUTPUTS"' 2> "$dir/err.txt"
rc=$?
[[ $rc == 1 ]] || fail "a result file over 1 MiB: exit $rc, want 1: $(cat "$dir/err.txt")"
grep -q 'TPUFLOW_OUTPUTS is 1100000 bytes: a result file holds at most 1048576' "$dir/store/e/stderr.log" ||
  fail "a result file over 1 MiB: not said in the log: $(obj e/stderr.log)"
[[ ! -e $dir/store/e/outputs ]] || fail "a result file over 1 MiB was put"
echo "it_step_job: a result file over 1 MiB -> exit 1, said in the log"

echo "it_step_job: passed"
