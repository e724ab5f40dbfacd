#!/usr/bin/env bash
# Integration: `executor: slurm` against a real one-node Slurm cluster (scripts/slurm-start.sh:
# slurmctld + slurmd + munged, 4 `tpu` GRES) and the S3 test server (Swift + s3api). Checks:
# the load-time storage rule; a shell step end to end (its logs put in the object store by the
# job); the node shares no filesystem with the coordinator (its state homes and TMPDIR are
# hidden from the node: TF_SLURM_HIDE), yet shell steps' outputs and metrics reach it and
# the steps after them (through the object store); one squeue per interval for three jobs
# (counted); the demo pipeline with its prep, train and evaluate steps on Slurm giving the
# same metrics and model bytes as in-process (register stays in tpuflow); a job cancelled from outside
# with scancel (cancelled, not retried); a step past its own timeout (scancel, timeout); a train
# job given fewer chips than its slice (error, said why); a job past its Slurm time limit
# (timeout, retried); slurmctld stopped for a while and started again (a running job followed
# on, a submission waiting for it, one attempt and one job each); a job sbatch refuses and one
# pending for a reason that never passes (error, not retried); a requeued train job (its epochs seen by the coordinator, no local slice
# held beside its GRES; preempted, resumed from its checkpoint); the node taken down mid-run
# (infra, retried); the node drained and the job requeued off it (infra, retried); `runs
# cancel` and Ctrl-C (SIGTERM) on the run (its job cancelled with scancel); the coordinator
# killed with -9 and resumed while its job runs, and the same with a daemon killed with -9 and
# restarted (followed again, no second job); a job queued and then suspended past the step's
# timeout (only run time counts: succeeded, its queue time said); jobs that ended while the
# coordinator was down (a failed one's outcome taken, one Slurm forgot submitted again); the
# coordinator killed right after its own scancel (the recorded reason decides, on resume).
# Stops exactly what it started.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
B=$root/$BUILD/tpuflow
[[ -x $B ]] || { echo "it_slurm: build first (make)"; exit 1; }
if ! command -v slurmctld >/dev/null && [[ ! -x /usr/sbin/slurmctld ]] ||
   ! command -v swift-proxy-server >/dev/null; then
  scripts/deps.sh test || { echo "it_slurm: cannot install slurm-wlm/munge/swift"; exit 1; }
fi
if [[ $(id -u) -ne 0 ]]; then
  # slurmd must run as root to start jobs as their users
  echo "it_slurm: SKIPPED (needs root to run slurmd)"
  exit 77
fi
PY=/usr/bin/python3

dir=$(mktemp -d /tmp/tpuflow-it-slurm.XXXXXX)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done
  "$root/scripts/slurm-stop.sh" "$dir/slurm"
  "$root/scripts/s3-server-stop.sh" "$dir/s3"
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "it_slurm: FAILED: $*"
  [[ -f $dir/slurm/log/slurmctld.log ]] && tail -5 "$dir/slurm/log/slurmctld.log"
  exit 1
}

# the coordinator's side: its state homes and temporary files, none of which the node sees
coord=$dir/coord
mkdir -p "$coord/tmp"
TF_SLURM_HIDE=$coord scripts/slurm-start.sh "$dir/slurm" || fail "Slurm did not start"
scripts/s3-server-start.sh "$dir/s3" >/dev/null || fail "the S3 server did not start"
set -a
. "$dir/slurm/slurm.env"
. "$dir/s3/s3.env"
set +a
export TPUFLOW_SLURM_POLL=0.3 TMPDIR=$coord/tmp
node=$TF_SLURM_NODE
bucket=it-slurm-$$
"$B" store mb "s3://$bucket" || fail "store mb"
cd "$coord"

# ---- helpers ----------------------------------------------------------------------------
run_id() { "$B" --home "$1" runs list --json | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'; }
# attempts HOME RUN STEP: one line per attempt, "N STATE CLASS JOB"
attempts() {
  "$B" --home "$1" runs show --json "$2" | $PY -c '
import json, sys
d = json.load(sys.stdin)
for s in d["steps"]:
    if s["name"] == sys.argv[1]:
        for a in s["attempts_detail"]:
            print(a["n"], a["state"], a["failure_class"] or "-", a.get("slurm_job") or "-")' "$3"
}
# running_job NAME_PREFIX: waits (60 s at most) for a running job whose name starts so
running_job() {
  for _ in $(seq 1 300); do
    id=$(squeue -h -t running -o '%i %j' | awk -v p="$1" 'index($2, p) == 1 {print $1; exit}')
    [[ -n $id ]] && { echo "$id"; return 0; }
    sleep 0.2
  done
  return 1
}
# shell_pipeline NAME SCRIPT [EXTRA_STEP_YAML]: a one-step pipeline running SCRIPT on Slurm
shell_pipeline() {
  cat > "$1.yaml" <<EOF
name: it-$1
storage: s3://$bucket/$1
defaults:
  retries: {limit: 1, backoff: 1s, on: [timeout, preempted, infra]}
steps:
  - name: work
    type: shell
    executor: slurm
${3:-}
    with:
      argv: [sh, -c, '$2']
      metrics: [answer]
EOF
}
WORK='if [ "$TPUFLOW_ATTEMPT" = 1 ]; then sleep 120; fi; echo answer=42 > "$TPUFLOW_METRICS"'

# ---- 1. storage every node reaches, checked at load time --------------------------------
cat > nostore.yaml <<'EOF'
name: it-nostore
steps:
  - name: work
    type: shell
    executor: slurm
    with:
      argv: [true]
EOF
"$B" validate nostore.yaml 2> err.txt && fail "a Slurm step without shared storage validated"
grep -q 'nostore.yaml:5:15: error: step .work. runs on Slurm' err.txt ||
  fail "no positioned storage error: $(cat err.txt)"
grep -q 'TPUFLOW_SHARED_STORAGE' err.txt || fail "the storage error has no hint: $(cat err.txt)"
sed 's|^steps:|storage: file:///tmp/shared-objects\nsteps:|' nostore.yaml > shared.yaml
TPUFLOW_SHARED_STORAGE=/tmp/shared-objects "$B" validate shared.yaml >/dev/null ||
  fail "a file:// storage declared shared was refused"

# ---- 2. shell steps end to end, on a node that cannot see the coordinator's files ---------
# work writes outputs and metrics to the files its variables name (on the node); next reads
# them through templates and answers through $TPUFLOW_RESULT; both come back by the store
touch "$coord/tmp/marker"
sed -e "s|@BUCKET@|$bucket|" -e "s|@MARKER@|$coord/tmp/marker|" > hello.yaml <<'EOF'
name: it-hello
storage: s3://@BUCKET@/hello
steps:
  - name: work
    type: shell
    executor: slurm
    with:
      argv:
        - sh
        - -c
        - |
          echo hello from $SLURMD_NODENAME
          if [ -e "$1" ]; then echo "the node sees the coordinator's $1"; exit 3; fi
          [ "$(pwd)" = "$TPUFLOW_WORKDIR" ] || { echo "runs in $(pwd), not $TPUFLOW_WORKDIR"; exit 3; }
          echo "greeting=hello from $SLURMD_NODENAME" > "$TPUFLOW_OUTPUTS"
          echo answer=42 > "$TPUFLOW_METRICS"
        - sh
        - '@MARKER@'
      outputs: [greeting]
      metrics: [answer]
  - name: next
    type: shell
    executor: slurm
    needs: [work]
    with:
      argv:
        - sh
        - -c
        - |
          printf '{"outputs": {"heard": "%s"}, "metrics": {"twice": %d}}' "$1" "$(($2 * 2))" > "$TPUFLOW_RESULT"
        - sh
        - ${steps.work.outputs.greeting}
        - ${steps.work.metrics.answer}
      outputs: [heard]
      metrics: [twice]
EOF
"$B" --home h-hello run hello.yaml > out.txt 2>&1 || fail "shell steps on Slurm: $(cat out.txt)"
run=$(run_id h-hello)
read -r n st cls job < <(attempts h-hello "$run" work)
[[ $st == succeeded && $job != - ]] || fail "shell attempt: $n $st $cls $job"
[[ $(squeue -h -t all -j "$job" -o '%j') == "tpuflow-$run-work-1" ]] || fail "job name of $job"
[[ $(squeue -h -t all -j "$job" -o '%k') == "tpuflow run=$run step=work attempt=1" ]] ||
  fail "job comment of $job: $(squeue -h -t all -j "$job" -o '%k')"
"$B" --home h-hello runs show --json "$run" > show.json
$PY - "$node" <<'PY' || fail "outputs and metrics of the Slurm shell steps: $(cat show.json)"
import json, sys
node = sys.argv[1]
steps = {s["name"]: s for s in json.load(open("show.json"))["steps"]}
work, nxt = steps["work"], steps["next"]
assert work["outputs"] == {"greeting": "hello from " + node}, work["outputs"]
assert work["metrics"] == {"answer": 42}, work["metrics"]
assert nxt["outputs"] == {"heard": "hello from " + node}, nxt["outputs"]
assert nxt["metrics"] == {"twice": 84}, nxt["metrics"]
PY
"$B" --home h-hello runs logs "$run" > logs.txt
grep -q "hello from $node" logs.txt || fail "job's stdout not in the log"
# the node put its logs and result files in the object store
"$B" store cat "s3://$bucket/hello/runs/$run/work/slurm/attempt-1/stdout.log" | grep -q "hello from $node" ||
  fail "the job's stdout is not in the object store"
"$B" store cat "s3://$bucket/hello/runs/$run/work/slurm/attempt-1/metrics" | grep -qx "answer=42" ||
  fail "the job's metrics file is not in the object store"
echo "it_slurm: shell steps ran as jobs on $node, which cannot see the coordinator's files: outputs and metrics passed on"

# ---- 2b. polling is batched: one squeue per interval for all of a coordinator's jobs -------
# squeue and sacct are counted by wrappers first on the coordinator's PATH
mkdir -p "$dir/shim"
for tool in squeue sacct; do
  real=$(command -v $tool)
  printf '#!/bin/sh\necho "%s $*" >> %s/calls.txt\nexec %s "$@"\n' "$tool" "$dir" "$real" > "$dir/shim/$tool"
  chmod +x "$dir/shim/$tool"
done
cat > poll.yaml <<EOF
name: it-poll
storage: s3://$bucket/poll
steps:
EOF
for i in 1 2 3; do
  printf '  - name: w%s\n    type: shell\n    executor: slurm\n    with: {argv: [sleep, "3"]}\n' "$i" >> poll.yaml
done
: > "$dir/calls.txt"
t0=$(date +%s.%N)
PATH=$dir/shim:$PATH "$B" --home h-poll run poll.yaml > poll.out 2>&1 || fail "poll run: $(tail -3 poll.out)"
t1=$(date +%s.%N)
sweeps=$(grep -c '^squeue .* -O ' "$dir/calls.txt")
# one sweep per 0.3 s interval, plus one at once for each newly submitted job (3), plus 2
max=$($PY -c "import sys; print(int((float(sys.argv[2]) - float(sys.argv[1])) / 0.3) + 5)" "$t0" "$t1")
[[ $sweeps -ge 1 && $sweeps -le $max ]] ||
  fail "polling: $sweeps squeue sweeps in $(echo "$t1 - $t0" | bc) s at 0.3 s intervals (at most $max)"
grep -qE '^squeue .* -j [0-9]+,[0-9]+,[0-9]+ ' "$dir/calls.txt" || fail "polling: no squeue asked for all 3 jobs at once"
[[ $(grep -c '^sacct' "$dir/calls.txt") -le $sweeps ]] || fail "polling: more sacct calls than sweeps"
echo "it_slurm: 3 jobs followed with $sweeps squeue calls (at most $max), $(grep -c '^sacct' "$dir/calls.txt") sacct"

# ---- 3. the node goes down mid-run: infra, retried once it is back ----------------------
shell_pipeline down "$WORK"
"$B" --home h-down run down.yaml > down.out 2>&1 &
bg+=($!) ; pid=$!
job=$(running_job "tpuflow-") || fail "node-down: the job never ran"
sleep 1 # let the coordinator see it running on the node: it asks that node's state after a requeue
scontrol update NodeName="$node" State=DOWN Reason=it-slurm-drill || fail "scontrol down"
for _ in $(seq 1 150); do
  squeue -h -t all -j "$job" -o '%T' | grep -q CANCELLED && break
  sleep 0.2
done
scontrol update NodeName="$node" State=RESUME || fail "scontrol resume"
wait "$pid" || fail "node-down run failed: $(tail -5 down.out)"
run=$(run_id h-down)
attempts h-down "$run" work > a.txt
grep -q '^1 failed infra' a.txt || fail "node-down: attempt 1 is not infra: $(cat a.txt)"
grep -q '^2 succeeded' a.txt || fail "node-down: no successful retry: $(cat a.txt)"
echo "it_slurm: node down -> $(head -1 a.txt | cut -d' ' -f3), retried"

# ---- 3b. the node drained and its job requeued off it: infra (not preempted), retried -----
shell_pipeline drain "$WORK"
"$B" --home h-drain run drain.yaml > drain.out 2>&1 &
bg+=($!) ; pid=$!
job=$(running_job "tpuflow-") || fail "drain: the job never ran"
sleep 1
scontrol update NodeName="$node" State=DRAIN Reason=it-slurm-drain || fail "scontrol drain"
scontrol requeue "$job" || fail "drain: scontrol requeue $job"
for _ in $(seq 1 150); do
  squeue -h -t all -j "$job" -o '%T' | grep -q CANCELLED && break
  sleep 0.2
done
scontrol update NodeName="$node" State=RESUME || fail "scontrol resume after drain"
wait "$pid" || fail "drain run failed: $(tail -5 drain.out)"
run=$(run_id h-drain)
attempts h-drain "$run" work > a.txt
grep -q '^1 failed infra' a.txt || fail "drain: attempt 1 is not infra: $(cat a.txt)"
grep -q '^2 succeeded' a.txt || fail "drain: no successful retry: $(cat a.txt)"
echo "it_slurm: node drained, job requeued -> infra, retried"

# ---- 4. past its Slurm time limit: timeout, retried (in the background: Slurm checks limits
#         every 30 s and its smallest limit is a minute, so this takes 60-90 s) -------------
shell_pipeline late "$WORK" '    slurm: {args: ["--time=1"]}'
"$B" --home h-late run late.yaml > late.out 2>&1 &
late_pid=$!
bg+=($late_pid)

# ---- 4b. the controller away for a while (it runs alongside 4, which waits for Slurm anyway):
#          a running job is followed on, a submission waits for it; neither run fails ------
shell_pipeline away1 'sleep 4; echo answer=42 > "$TPUFLOW_METRICS"' '    retries: 0'
shell_pipeline away2 'echo answer=42 > "$TPUFLOW_METRICS"' '    retries: 0'
"$B" --home h-away1 run away1.yaml > away1.out 2>&1 &
p1=$!
bg+=($p1)
run1=
for _ in $(seq 1 100); do run1=$(run_id h-away1 2>/dev/null) && [[ -n $run1 ]] && break; sleep 0.1; done
job1=$(running_job "tpuflow-$run1-work") || fail "away: the job of run '$run1' never ran: $(tail -5 away1.out)"
ctld=$(cat "$dir/slurm/run/slurmctld.pid")
kill "$ctld" || fail "away: cannot stop slurmctld"
for _ in $(seq 1 100); do kill -0 "$ctld" 2>/dev/null || break; sleep 0.1; done
"$B" --home h-away2 run away2.yaml > away2.out 2>&1 &
p2=$!
bg+=($p2)
# the controller comes back once sbatch has given up on it (~9 s) and the run waits
for _ in $(seq 1 300); do grep -q 'trying again until Slurm answers' away2.out && break; sleep 0.2; done
sleep 1
/usr/sbin/slurmctld -f "$SLURM_CONF" || fail "away: slurmctld did not start again"
for _ in $(seq 1 150); do squeue -h >/dev/null 2>&1 && break; sleep 0.2; done
wait "$p1" || fail "away: the run whose job ran while slurmctld was away failed: $(tail -5 away1.out)"
wait "$p2" || fail "away: the run submitted while slurmctld was away failed: $(tail -5 away2.out)"
grep -q 'trying again until Slurm answers' away2.out ||
  fail "away: the submission did not meet the absent controller: $(tail -5 away2.out)"
run2=$(run_id h-away2)
attempts h-away1 "$run1" work > a.txt
[[ $(cat a.txt) == "1 succeeded - $job1" ]] || fail "away: attempts of the running job: $(cat a.txt)"
attempts h-away2 "$run2" work > a.txt
read -r n st cls job2 < a.txt
[[ $(wc -l < a.txt) -eq 1 && $st == succeeded && $job2 != - ]] || fail "away: attempts of the waiting submission: $(cat a.txt)"
n_jobs=$(squeue -h -t all -o '%j' | grep -c "^tpuflow-$run2-work-")
[[ $n_jobs -eq 1 ]] || fail "away: $n_jobs jobs for the waiting submission, want 1"
echo "it_slurm: slurmctld away: job $job1 followed on, the submission waited (job $job2), 1 attempt each"

# ---- 5. cancelled from outside with scancel: cancelled, not retried ----------------------
shell_pipeline cancel 'sleep 120'
"$B" --home h-cancel run cancel.yaml > cancel.out 2>&1 &
pid=$!
bg+=($pid)
run=
for _ in $(seq 1 100); do run=$(run_id h-cancel 2>/dev/null) && [[ -n $run ]] && break; sleep 0.1; done
job=$(running_job "tpuflow-$run-work") || fail "cancel: the job of run '$run' never ran: $(tail -5 cancel.out)"
scancel "$job"
wait "$pid" && fail "a run whose job was scancelled succeeded"
attempts h-cancel "$run" work > a.txt
[[ $(wc -l < a.txt) -eq 1 ]] || fail "cancel: a cancelled attempt was retried: $(cat a.txt)"
grep -q '^1 failed cancelled' a.txt || fail "cancel: attempt is not cancelled: $(cat a.txt)"
echo "it_slurm: scancel from outside -> cancelled"

# ---- 5b. the step's own timeout: the run cancels the job (scancel) and counts a timeout ----
shell_pipeline deadline 'sleep 120' '    timeout: 3s
    retries: 0'
"$B" --home h-deadline run deadline.yaml > deadline.out 2>&1 && fail "a step past its timeout succeeded"
run=$(run_id h-deadline)
attempts h-deadline "$run" work > a.txt
read -r n st cls job < a.txt
[[ $st == failed && $cls == timeout && $job != - ]] || fail "timeout: attempt: $(cat a.txt)"
[[ $(squeue -h -t all -j "$job" -o '%T') == CANCELLED ]] || fail "timeout: job $job was not cancelled"
echo "it_slurm: step timeout -> job $job cancelled, timeout"

# ---- 5f (start). the step's timeout counts run time only: its job waits in the queue past
#          the timeout (behind a held job it depends on, while 5e runs) ---------------------
held=$(sbatch --parsable --hold --output=/dev/null --wrap true) || fail "sbatch --hold"
shell_pipeline idle 'echo working; sleep 2; echo answer=42 > "$TPUFLOW_METRICS"' "    timeout: 8s
    retries: 0
    slurm: {args: [--dependency=afterany:$held]}"
"$B" --home h-idle run idle.yaml > idle.out 2>&1 &
idle_pid=$!
bg+=($idle_pid)
idle_t0=$SECONDS

# ---- 5e. a job sbatch refuses, and one that can never start: error, not retried -----------
shell_pipeline refused 'true' '    slurm: {partition: nosuch}'
"$B" --home h-refused run refused.yaml > refused.out 2>&1 && fail "a job on a partition that does not exist succeeded"
run=$(run_id h-refused)
attempts h-refused "$run" work > a.txt
[[ $(cat a.txt) == "1 failed error -" ]] || fail "refused: attempts: $(cat a.txt)"
grep -q 'sbatch refused the job: .*Invalid partition name' refused.out || fail "refused: sbatch's reason is not said: $(tail -3 refused.out)"
dep=$(sbatch --parsable --output=/dev/null --wrap 'exit 1') || fail "sbatch of a failing job"
for _ in $(seq 1 150); do [[ $(squeue -h -t all -j "$dep" -o '%T') == FAILED ]] && break; sleep 0.2; done
shell_pipeline never 'true' "    slurm: {args: [--dependency=afterok:$dep]}"
"$B" --home h-never run never.yaml > never.out 2>&1 && fail "a job that could never start succeeded"
run=$(run_id h-never)
attempts h-never "$run" work > a.txt
read -r n st cls job < a.txt
[[ $(wc -l < a.txt) -eq 1 && $st == failed && $cls == error && $job != - ]] || fail "never: attempts: $(cat a.txt)"
[[ $(squeue -h -t all -j "$job" -o '%T') == CANCELLED ]] || fail "never: job $job was not cancelled"
grep -q 'DependencyNeverSatisfied' never.out || fail "never: the reason is not said: $(tail -3 never.out)"
echo "it_slurm: sbatch refusing the job, and a job that can never start -> error, not retried"

# ---- 5f (end). queued past its timeout, then suspended past it (scontrol suspend): neither
#          counts, the step succeeds; the time it waited is in its events and log ----------
while ((SECONDS - idle_t0 < 11)); do sleep 0.5; done
kill -0 "$idle_pid" 2>/dev/null || fail "queued: the run ended while its job waited in the queue: $(tail -3 idle.out)"
run=$(run_id h-idle)
scancel "$held"
job=$(running_job "tpuflow-$run-work") || fail "queued: the job never ran: $(tail -3 idle.out)"
scontrol suspend "$job" || fail "scontrol suspend $job"
sleep 10
kill -0 "$idle_pid" 2>/dev/null || fail "suspended: the run ended while its job was suspended: $(tail -3 idle.out)"
scontrol resume "$job" || fail "scontrol resume $job"
wait "$idle_pid" || fail "queued and suspended past its timeout: $(tail -3 idle.out)"
attempts h-idle "$run" work > a.txt
[[ $(cat a.txt) == "1 succeeded - $job" ]] || fail "queued and suspended: attempts: $(cat a.txt)"
"$B" --home h-idle runs logs "$run" > logs.txt
grep -qE "Slurm job $job started on $node after (1[0-9]|[2-9][0-9])s in the queue" logs.txt ||
  fail "queued: no event says how long the job waited: $(cat logs.txt)"
grep -qE "Slurm job $job on $node: COMPLETED \(queued (1[0-9]|[2-9][0-9])s, ran [0-9]+s, suspended (9|[1-9][0-9])s\)" logs.txt ||
  fail "queued and suspended: the log does not give the job's times: $(cat logs.txt)"
echo "it_slurm: queued $(grep -oE 'queued [0-9]+s' logs.txt | tail -1 | cut -d' ' -f2) and suspended past a timeout of 8s -> succeeded"

# ---- 5c. `runs cancel` from another terminal: the run cancels its job with scancel ---------
# run_started NAME HOME: starts `tpuflow run` on NAME.yaml in the background (pid in $pid),
# waits for its run id ($run) and its running job ($job)
run_started() {
  "$B" --home "$2" run "$1.yaml" > "$1.out" 2>&1 &
  pid=$!
  bg+=($pid)
  run=
  for _ in $(seq 1 100); do run=$(run_id "$2" 2>/dev/null) && [[ -n $run ]] && break; sleep 0.1; done
  job=$(running_job "tpuflow-$run-work") ||
    fail "$1: the job of run '$run' never ran: $(tail -5 "$1.out"); $("$B" --home "$2" runs show "$run" 2>&1 | tail -5)"
}
# run_state HOME RUN
run_state() { "$B" --home "$1" runs show --json "$2" | $PY -c 'import json, sys; print(json.load(sys.stdin)["state"])'; }
shell_pipeline rcancel 'sleep 120'
run_started rcancel h-rcancel
"$B" --home h-rcancel runs cancel "$run" > /dev/null || fail "runs cancel $run"
wait "$pid" && fail "a run cancelled with 'runs cancel' succeeded"
[[ $(squeue -h -t all -j "$job" -o '%T') == CANCELLED ]] ||
  fail "runs cancel: job $job is $(squeue -h -t all -j "$job" -o '%T'), not CANCELLED"
attempts h-rcancel "$run" work > a.txt
[[ $(wc -l < a.txt) -eq 1 ]] && grep -q "^1 cancelled cancelled $job\$" a.txt ||
  fail "runs cancel: attempts: $(cat a.txt)"
[[ $(run_state h-rcancel "$run") == failed ]] || fail "runs cancel: run is $(run_state h-rcancel "$run")"
echo "it_slurm: runs cancel -> job $job cancelled with scancel, run failed"

# ---- 5d. Ctrl-C (SIGTERM) on the run: its job is cancelled, the run interrupted ------------
shell_pipeline intr 'sleep 120'
run_started intr h-intr
kill -TERM "$pid"
wait "$pid" && fail "an interrupted run exited 0"
[[ $(squeue -h -t all -j "$job" -o '%T') == CANCELLED ]] ||
  fail "Ctrl-C: job $job is $(squeue -h -t all -j "$job" -o '%T'), not CANCELLED"
attempts h-intr "$run" work > a.txt
grep -q "^1 cancelled cancelled $job\$" a.txt || fail "Ctrl-C: attempts: $(cat a.txt)"
[[ $(run_state h-intr "$run") == interrupted ]] || fail "Ctrl-C: run is $(run_state h-intr "$run")"
echo "it_slurm: Ctrl-C -> job $job cancelled with scancel, run interrupted"

# ---- 6. the coordinator killed with -9 while its job runs, then resumed --------------------
shell_pipeline crash 'sleep 6; echo answer=42 > "$TPUFLOW_METRICS"'
"$B" --home h-crash run crash.yaml > crash.out 2>&1 &
pid=$!
run=
for _ in $(seq 1 100); do run=$(run_id h-crash 2>/dev/null) && [[ -n $run ]] && break; sleep 0.1; done
job=$(running_job "tpuflow-$run-work") || fail "crash: the job never ran"
# `tpuflow slices` lists the step with its job id and node
for _ in $(seq 1 50); do
  "$B" --home h-crash slices --json > slices.json
  $PY -c 'import json, sys
s = json.load(open("slices.json"))["recorded"]["slurm"]
sys.exit(0 if s and s[0]["slurm_job"] == int(sys.argv[1]) and s[0]["nodes"] == sys.argv[2] else 1)' "$job" "$node" && break
  sleep 0.1
done
"$B" --home h-crash slices > slices.txt
grep -q "work .* $job .*$node" slices.txt || fail "slices does not show job $job on $node: $(cat slices.txt)"
kill -9 "$pid"
wait "$pid" 2>/dev/null
[[ $(squeue -h -j "$job" -o '%T') == RUNNING ]] || fail "crash: the job did not outlive its coordinator"
"$B" --home h-crash runs resume "$run" > resume.out 2>&1 || fail "resume: $(tail -5 resume.out)"
n_jobs=$(squeue -h -t all -o '%j' | grep -c "^tpuflow-$run-work-")
[[ $n_jobs -eq 1 ]] || fail "crash: $n_jobs jobs for the step, want 1: $(squeue -h -t all -o '%i %j')"
attempts h-crash "$run" work > a.txt
grep -q "^1 lost infra $job" a.txt || fail "crash: attempt 1: $(cat a.txt)"
grep -q "^2 succeeded - $job" a.txt || fail "crash: attempt 2 did not follow job $job: $(cat a.txt)"
[[ $(scontrol show job "$job" | grep -o 'JobState=[A-Z]*') == JobState=COMPLETED ]] ||
  fail "crash: job $job did not complete"
echo "it_slurm: coordinator killed -9 and resumed: followed job $job again, 1 job in all"
# the REST API shows each attempt's Slurm job: its id, nodes and Slurm's state as last seen
# (the lost attempt's job was running when its coordinator died; the one that followed it
# again saw it complete), which the dashboard's run page draws
"$B" daemon --home h-crash --listen 127.0.0.1:0 --no-auth > daemon.log 2>&1 &
bg+=($!)
for _ in $(seq 1 200); do [[ -s h-crash/daemon.json ]] && break; sleep 0.05; done
url=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' h-crash/daemon.json) ||
  fail "the daemon did not start: $(tail -3 daemon.log)"
curl -sf "$url/api/v1/runs/$run/steps" > steps.json || fail "GET /api/v1/runs/$run/steps"
$PY -c 'import json, sys
job, node = int(sys.argv[1]), sys.argv[2]
a = [s for s in json.load(open("steps.json"))["items"] if s["name"] == "work"][0]["attempts_detail"]
got = [(x["state"], x.get("slurm_job"), x.get("slurm_nodes"), x.get("slurm_state")) for x in a]
want = [("lost", job, node, "RUNNING"), ("succeeded", job, node, "COMPLETED")]
sys.exit(0 if got == want else "attempts %s, want %s" % (got, want))' "$job" "$node" ||
  fail "the steps API does not show the Slurm jobs"
kill "${bg[-1]}"
echo "it_slurm: the steps API shows job $job on $node, RUNNING then COMPLETED"

# ---- 6b. the daemon killed with -9 while its run's job runs, then restarted ----------------
# the next daemon adopts the run (its owner is gone) and follows the same job
start_daemon() {
  "$B" daemon --home h-daemon --listen 127.0.0.1:0 --no-auth >> daemon.log 2>&1 &
  dpid=$!
  bg+=($dpid)
  for _ in $(seq 1 200); do
    [[ -s h-daemon/daemon.json ]] && grep -q "\"pid\": $dpid" h-daemon/daemon.json && return 0
    sleep 0.05
  done
  fail "the daemon did not start: $(tail -5 daemon.log)"
}
shell_pipeline dcrash 'sleep 8; echo answer=42 > "$TPUFLOW_METRICS"'
start_daemon
run=$("$B" --home h-daemon run dcrash.yaml --detach) || fail "run --detach on the daemon"
job=$(running_job "tpuflow-$run-work") || fail "daemon: the job never ran"
{ kill -9 "$dpid"; wait "$dpid"; } 2>/dev/null
[[ $(squeue -h -j "$job" -o '%T') == RUNNING ]] || fail "daemon: the job did not outlive the daemon"
start_daemon
for _ in $(seq 1 300); do
  st=$(run_state h-daemon "$run")
  [[ $st == succeeded || $st == failed ]] && break
  sleep 0.2
done
[[ $st == succeeded ]] || fail "daemon: the adopted run is $st: $(tail -5 daemon.log)"
kill -TERM "$dpid"
wait "$dpid" 2>/dev/null
n_jobs=$(squeue -h -t all -o '%j' | grep -c "^tpuflow-$run-work-")
[[ $n_jobs -eq 1 ]] || fail "daemon: $n_jobs jobs for the step, want 1: $(squeue -h -t all -o '%i %j')"
attempts h-daemon "$run" work > a.txt
grep -q "^1 lost infra $job" a.txt || fail "daemon: attempt 1: $(cat a.txt)"
grep -q "^2 succeeded - $job" a.txt || fail "daemon: attempt 2 did not follow job $job: $(cat a.txt)"
echo "it_slurm: daemon killed -9 and restarted: it followed job $job again, 1 job in all"

# ---- 6c. jobs that ended while no coordinator followed them: the resume takes the outcome
#          of one that failed (error, retried as the step says: one more job); of one squeue
#          has forgotten, from the job completion log (`sacct -c`: the cluster has no
#          accounting daemon, but jobcomp/filetxt); and submits again, saying so, for one
#          Slurm no longer knows at all (forgotten by squeue and sacct wrappers) -------------
cat > lost.yaml <<EOF
name: it-lost
storage: s3://$bucket/lost
steps:
  - name: bad
    type: shell
    executor: slurm
    retries: {limit: 1, backoff: 1s, on: [error]}
    with:
      argv: [sh, -c, 'if [ "\$TPUFLOW_ATTEMPT" = 1 ]; then sleep 3; exit 3; fi; echo answer=42 > "\$TPUFLOW_METRICS"']
      metrics: [answer]
  - name: gone
    type: shell
    executor: slurm
    retries: 0
    with:
      argv: [sh, -c, 'sleep 3; echo answer=42 > "\$TPUFLOW_METRICS"']
      metrics: [answer]
  - name: told
    type: shell
    executor: slurm
    retries: 0
    with:
      argv: [sh, -c, 'sleep 3; echo answer=43 > "\$TPUFLOW_METRICS"']
      metrics: [answer]
EOF
"$B" --home h-lost run lost.yaml > lost.out 2>&1 &
pid=$!
bg+=($pid)
run=
for _ in $(seq 1 100); do run=$(run_id h-lost 2>/dev/null) && [[ -n $run ]] && break; sleep 0.1; done
jbad= jgone= jtold=
for _ in $(seq 1 300); do
  jbad=$(squeue -h -t all -o '%i %j' | awk -v n="tpuflow-$run-bad-1" '$2 == n {print $1}')
  jgone=$(squeue -h -t all -o '%i %j' | awk -v n="tpuflow-$run-gone-1" '$2 == n {print $1}')
  jtold=$(squeue -h -t all -o '%i %j' | awk -v n="tpuflow-$run-told-1" '$2 == n {print $1}')
  [[ -n $jbad && -n $jgone && -n $jtold ]] && break
  sleep 0.1
done
[[ -n $jbad && -n $jgone && -n $jtold ]] || fail "lost: the jobs were not submitted: $(tail -3 lost.out)"
{ kill -9 "$pid"; wait "$pid"; } 2>/dev/null
for _ in $(seq 1 450); do
  [[ $(squeue -h -t all -j "$jbad" -o '%T') == FAILED && $(squeue -h -t all -j "$jgone" -o '%T') == COMPLETED &&
     $(squeue -h -t all -j "$jtold" -o '%T') == COMPLETED ]] && break
  sleep 0.2
done
[[ $(squeue -h -t all -j "$jbad" -o '%T') == FAILED ]] || fail "lost: job $jbad did not fail"
[[ $(squeue -h -t all -j "$jtold" -o '%T') == COMPLETED ]] || fail "lost: job $jtold did not complete"
# forget TOOL IDS ALL_GONE: a wrapper of TOOL that leaves IDS out of every -j list (squeue
# past MinJobAge, accounting without a record), running ALL_GONE when none is left
forget() {
  sed -e "s|@IDS@|$2|" -e "s|@REAL@|$(command -v "$1")|" -e "s|@GONE@|$3|" > "$dir/forget/$1" <<'EOS'
#!/bin/bash
echo "$(basename "$0") $*" >> "${0%/*}/calls.txt"
args=()
while (($#)); do
  if [[ $1 == -j ]]; then
    keep=
    IFS=, read -ra ids <<< "$2"
    for i in "${ids[@]}"; do [[ ,@IDS@, == *",$i,"* ]] || keep+=${keep:+,}$i; done
    [[ -n $keep ]] || { @GONE@; }
    args+=(-j "$keep")
    shift 2
    continue
  fi
  args+=("$1")
  shift
done
exec @REAL@ "${args[@]}"
EOS
  chmod +x "$dir/forget/$1"
}
mkdir -p "$dir/forget"
forget squeue "$jgone,$jtold" 'echo "slurm_load_jobs error: Invalid job id specified" >\&2; exit 1'
forget sacct "$jgone" 'exit 0'
PATH=$dir/forget:$PATH "$B" --home h-lost runs resume "$run" > lost-resume.out 2>&1 ||
  fail "lost: resume: $(tail -5 lost-resume.out)"
attempts h-lost "$run" bad > a.txt
[[ $(sed -n 2p a.txt) == "2 failed error $jbad" ]] ||
  fail "lost: the failed job's outcome was not taken: $(cat a.txt)"
grep -qE '^3 succeeded - [0-9]+$' a.txt && ! grep -q "^3 .* $jbad\$" a.txt ||
  fail "lost: no new job after the taken failure: $(cat a.txt)"
attempts h-lost "$run" gone > a.txt
grep -qE '^2 succeeded - [0-9]+$' a.txt && ! grep -q "^2 .* $jgone\$" a.txt ||
  fail "lost: the forgotten job was not submitted again: $(cat a.txt)"
grep -q "attempt 1's Slurm job $jgone is unknown to Slurm" lost-resume.out ||
  fail "lost: the resubmission is not explained: $(cat lost-resume.out)"
"$B" --home h-lost runs logs "$run" gone | grep -q "is unknown to Slurm" ||
  fail "lost: the run's events do not say the job was unknown"
attempts h-lost "$run" told > a.txt
[[ $(tr '\n' ' ' < a.txt) == "1 lost infra $jtold 2 succeeded - $jtold " ]] ||
  fail "lost: the outcome of job $jtold, which squeue forgot, was not taken from sacct -c: $(cat a.txt)"
"$B" --home h-lost runs show --json "$run" | $PY -c '
import json, sys
m = [s["metrics"] for s in json.load(sys.stdin)["steps"] if s["name"] == "told"][0]
sys.exit(0 if m == {"answer": 43} else "metrics %s" % m)' || fail "lost: the results of job $jtold were not read"
grep -q "^sacct -c .*-j $jtold -o JobID,State" "$dir/forget/calls.txt" ||
  fail "lost: the coordinator did not ask the job completion log about job $jtold: $(cat "$dir/forget/calls.txt")"
echo "it_slurm: jobs ended while the coordinator was down -> FAILED taken as error (retried), one squeue forgot taken from sacct -c, an unknown one submitted again"

# ---- 6d. tpuflow's own cancel, recorded before its scancel: the coordinator killed with -9
#          right after the scancel (a wrapper that runs the real one, then kills its caller),
#          then resumed: the step's timeout ends the attempt as a timeout (retried), Ctrl-C's
#          cancel is no outcome of the step (a new job); neither is "cancelled by someone" ---
mkdir -p "$dir/killer"
printf '#!/bin/sh\n%s "$@"; rc=$?\nkill -9 $PPID\nexit $rc\n' "$(command -v scancel)" > "$dir/killer/scancel"
chmod +x "$dir/killer/scancel"
shell_pipeline tkill "$WORK" '    timeout: 10s'
shell_pipeline ckill "$WORK"
PATH=$dir/killer:$PATH "$B" --home h-tkill run tkill.yaml > tkill.out 2>&1 &
tpid=$!
bg+=($tpid)
PATH=$dir/killer:$PATH "$B" --home h-ckill run ckill.yaml > ckill.out 2>&1 &
cpid=$!
bg+=($cpid)
trun= crun=
for _ in $(seq 1 100); do
  trun=$(run_id h-tkill 2>/dev/null) crun=$(run_id h-ckill 2>/dev/null) && [[ -n $trun && -n $crun ]] && break
  sleep 0.1
done
cjob=$(running_job "tpuflow-$crun-work") || fail "ckill: the job never ran: $(tail -5 ckill.out)"
tjob=$(running_job "tpuflow-$trun-work") || fail "tkill: the job never ran: $(tail -5 tkill.out)"
kill -TERM "$cpid"
{ wait "$cpid"; } 2>/dev/null; rc=$?
[[ $rc -eq 137 ]] || fail "ckill: the coordinator was not killed after its scancel (exit $rc): $(tail -5 ckill.out)"
{ wait "$tpid"; } 2>/dev/null; rc=$?
[[ $rc -eq 137 ]] || fail "tkill: the coordinator was not killed after its scancel (exit $rc): $(tail -5 tkill.out)"
for j in "$tjob" "$cjob"; do
  for _ in $(seq 1 50); do [[ $(squeue -h -t all -j "$j" -o '%T') == CANCELLED ]] && break; sleep 0.2; done
  [[ $(squeue -h -t all -j "$j" -o '%T') == CANCELLED ]] || fail "killed after scancel: job $j is not CANCELLED"
done
"$B" --home h-tkill runs logs "$trun" | grep -q "tpuflow cancels Slurm job $tjob (scancel): it ran past the step's timeout" ||
  fail "tkill: the stop was not recorded before the scancel: $("$B" --home h-tkill runs logs "$trun" | tail -5)"
"$B" --home h-tkill runs resume "$trun" > tkill-resume.out 2>&1 ||
  fail "tkill: resume: $(tail -5 tkill-resume.out)"
attempts h-tkill "$trun" work > a.txt
[[ $(sed -n 1,2p a.txt | tr '\n' ' ') == "1 lost infra $tjob 2 failed timeout $tjob " ]] ||
  fail "tkill: the cancelled job was not taken as the timeout tpuflow cancelled it for: $(cat a.txt)"
grep -qE '^3 succeeded - [0-9]+$' a.txt && ! grep -q "^3 .* $tjob\$" a.txt ||
  fail "tkill: the timeout was not retried with a new job: $(cat a.txt)"
"$B" --home h-ckill runs resume "$crun" > ckill-resume.out 2>&1 ||
  fail "ckill: resume: $(tail -5 ckill-resume.out)"
attempts h-ckill "$crun" work > a.txt
grep -q "^1 lost infra $cjob\$" a.txt && grep -qE '^2 succeeded - [0-9]+$' a.txt && ! grep -q "^2 .* $cjob\$" a.txt ||
  fail "ckill: the job cancelled with its run was taken as the step's outcome: $(cat a.txt)"
"$B" --home h-ckill runs logs "$crun" | grep -q "attempt 1's Slurm job $cjob was cancelled with its run" ||
  fail "ckill: the new job is not explained: $("$B" --home h-ckill runs logs "$crun" | tail -5)"
echo "it_slurm: coordinator killed -9 right after its scancel -> timeout taken as timeout (retried), Ctrl-C's cancel resubmitted"

# ---- 7. the demo pipeline with prep, train and evaluate on Slurm: same bits as in-process --
sed -e "s|^defaults:|storage: s3://$bucket/demo\n\ndefaults:|" \
    -e 's/^      shards: 8/      shards: 8\n      limit_train: 6000\n      limit_test: 2000/' \
    -e 's/^      checkpoint_every: 500/      checkpoint_every: 20/' \
    "$root/pipelines/fashion-mnist.yaml" > demo-in.yaml
# defaults.executor: slurm applies to data_prep, train and evaluate (register and deploy stay)
sed 's/^  executor: inprocess$/  executor: slurm/' demo-in.yaml > demo-slurm.yaml
grep -q '^  executor: slurm$' demo-slurm.yaml || fail "could not make the Slurm demo pipeline"
"$B" --home h-demo-in run demo-in.yaml --param epochs=2 > demo-in.out 2>&1 || fail "demo in-process: $(tail -3 demo-in.out)"
"$B" --home h-demo-sl run demo-slurm.yaml --param epochs=2 > demo-sl.out 2>&1 || fail "demo on Slurm: $(tail -3 demo-sl.out)"
r_in=$(run_id h-demo-in) r_sl=$(run_id h-demo-sl)
metrics() { "$B" --home "$1" runs show --json "$2" | $PY -c '
import json, sys
d = json.load(sys.stdin)
print(json.dumps({s["name"]: {k: v for k, v in s["metrics"].items() if k in ("loss", "accuracy", "auc")}
                  for s in d["steps"] if s["name"] in ("train", "evaluate")}, sort_keys=True))'; }
m_in=$(metrics h-demo-in "$r_in") m_sl=$(metrics h-demo-sl "$r_sl")
[[ $m_in == "$m_sl" ]] || fail "metrics differ: in-process $m_in, Slurm $m_sl"
for st in prep train evaluate; do
  attempts h-demo-sl "$r_sl" $st | grep -q '^1 succeeded - [0-9]' || fail "step $st did not run on Slurm"
done
attempts h-demo-sl "$r_sl" register | grep -q '^1 succeeded - -$' || fail "register did not stay in tpuflow"
for f in model.safetensors; do # signature.json names its run
  a=$("$B" store cat "s3://$bucket/demo/runs/$r_in/train/bundle/$f" | sha256sum)
  b=$("$B" store cat "s3://$bucket/demo/runs/$r_sl/train/bundle/$f" | sha256sum)
  [[ $a == "$b" ]] || fail "bundle $f differs between in-process and Slurm"
done
echo "it_slurm: demo on Slurm = in-process: $m_sl"

# the chips a job holds are checked on the node: a v4-8 train job given 2 chips fails
awk '{print} /^    timeout: 20m/{print "    slurm: {args: [--gres=tpu:2]}"}' demo-slurm.yaml > demo-2chips.yaml
"$B" --home h-2chips run demo-2chips.yaml --param epochs=1 > 2chips.out 2>&1 && fail "a train job with too few chips succeeded"
run=$(run_id h-2chips)
attempts h-2chips "$run" train > a.txt
grep -q '^1 failed error' a.txt || fail "too few chips: attempt: $(cat a.txt)"
"$B" --home h-2chips runs show --json "$run" > show.json
grep -q 'holds 2 TPU chip(s) (2 per node on 1 node(s)) but slice v4-8 needs 4' show.json ||
  fail "too few chips: no clear error"
echo "it_slurm: a v4-8 train job given 2 chips -> error, said why"

# ---- 8. a train job requeued (scontrol requeue): preempted, resumed from its checkpoint ----
TPUFLOW_LOG=info "$B" --home h-requeue run demo-slurm.yaml --param epochs=60 > requeue.out 2>&1 &
pid=$!
bg+=($pid)
run=
for _ in $(seq 1 100); do run=$(run_id h-requeue 2>/dev/null) && [[ -n $run ]] && break; sleep 0.1; done
job=$(running_job "tpuflow-$run-train") || fail "requeue: the train job never ran"
# its chips are the job's GRES: no slice of the home's own pool is held for it as well
"$B" --home h-requeue slices --json > slices.json
$PY -c 'import json, sys
r = json.load(open("slices.json"))["recorded"]
held = [j for j in r["running"] + r["waiting"] if j["run"] == sys.argv[1]]
slurm = [j for j in r["slurm"] if j["run"] == sys.argv[1] and j["step"] == "train"]
sys.exit(0 if not held and slurm else 1)' "$run" ||
  fail "requeue: a Slurm train step also holds a local slice: $(cat slices.json)"
for _ in $(seq 1 300); do
  ck=$("$B" ckpt list --json "s3://$bucket/demo/runs/$run/train/ckpt" 2>/dev/null)
  [[ $ck =~ \"latest\":\ *[1-9] ]] && break
  sleep 0.1
done
# its progress reaches the coordinator (through the object store) and the database: epochs
for _ in $(seq 1 150); do
  "$B" --home h-requeue runs show --json "$run" > show.json
  $PY -c 'import json, sys
d = json.load(open("show.json"))
p = [s.get("progress") for s in d["steps"] if s["name"] == "train"][0]
sys.exit(0 if isinstance(p, dict) and "epoch" in p else 1)' && break
  sleep 0.2
done
$PY -c 'import json, sys
d = json.load(open("show.json"))
p = [s.get("progress") for s in d["steps"] if s["name"] == "train"][0]
sys.exit(0 if isinstance(p, dict) and "epoch" in p else 1)' ||
  fail "requeue: no training progress (epoch) recorded while the Slurm job ran: $(cat show.json)"
scontrol requeue "$job" || fail "scontrol requeue $job"
wait "$pid" || fail "requeue run failed: $(tail -5 requeue.out)"
attempts h-requeue "$run" train > a.txt
grep -q '^1 failed preempted' a.txt || fail "requeue: attempt 1 is not preempted: $(cat a.txt)"
grep -q '^2 succeeded' a.txt || fail "requeue: no successful retry: $(cat a.txt)"
"$B" --home h-requeue runs logs "$run" > logs.txt
grep -q 'resuming from step' logs.txt ||
  fail "requeue: attempt 2 did not resume from a checkpoint"
echo "it_slurm: requeue -> preempted, resumed from checkpoint"

# ---- 4 (end). the job past its time limit --------------------------------------------------
wait "$late_pid" || fail "time-limit run failed: $(tail -5 late.out)"
run=$(run_id h-late)
attempts h-late "$run" work > a.txt
grep -q '^1 failed timeout' a.txt || fail "time limit: attempt 1 is not a timeout: $(cat a.txt)"
grep -q '^2 succeeded' a.txt || fail "time limit: no successful retry: $(cat a.txt)"
echo "it_slurm: past --time -> timeout, retried"

echo "it_slurm: passed in ${SECONDS} s"
