#!/usr/bin/env bash
# Integration: one slice pool shared by every `tpuflow run` process on a home, on a pool that
# fits one train slice.
#  1. Two embedded runs at once: never the same chips at the same time (asserted from the
#     slice_jobs rows), the second waits with its reason shown by `tpuflow slices`, both
#     finish.
#  2. Preemption, between two runs a daemon drives (submitted by `tpuflow run` to the daemon
#     of the home): a long priority-2 training is preempted by a priority-8 run: it checkpoints
#     where it is (SIGTERM to its step process), gives the chips back, its attempt is recorded
#     as `preempted`, it waits, resumes from that checkpoint and finishes; both register one
#     model version each, and the victim's weights are byte-identical to an uninterrupted run
#     with the same seed (embedded, in another home, so the step cache cannot help).
#  3. Chip failure under a run a daemon drives: on a pool with room for two slices, `tpuflow
#     slices fail` on a chip under a training ends its attempt as `infra`; it is placed again
#     on the healthy half, resumes from its checkpoint and ends with the same bytes.
# Small CSV data and short trainings keep it to seconds.
. "$(dirname "$0")/lib.sh" it_pool pool
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "it_pool: FAILED: $*"; for f in "$dir"/*.out; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
# A daemon for the home $TPUFLOW_HOME (with this environment's pool): `tpuflow run` on that home
# submits to it, and the daemon's runner drives the runs (its log, $dlog, says which it started).
start_daemon() {
  dlog=$dir/daemon-$(basename "$TPUFLOW_HOME").out
  TPUFLOW_LOG=info "$bin" daemon --listen 127.0.0.1:0 --grace 20s >"$dlog" 2>&1 &
  dpid=$!; pids+=($dpid)
  for _ in $(seq 1 200); do [[ -s $TPUFLOW_HOME/daemon.json ]] && return 0; sleep 0.05; done
  fail "the daemon of $TPUFLOW_HOME did not start"
}
stop_daemon() { kill -TERM "$dpid"; wait "$dpid" || fail "the daemon of $TPUFLOW_HOME exited $?"; pids=(); }
cd "$dir"
export TPUFLOW_POOLS=v4:2x2x1 TPUFLOW_HOME=$dir/home

csv_data data.csv
cat >p.yaml <<'EOF'
name: pooltrain
params:
  steps: {type: int, default: 200}
steps:
  - name: prep
    type: data_prep
    with: {source: csv, path: data.csv, csv_label: label, test_fraction: 0.2, shards: 2, seed: 7}
  - name: train
    type: train
    needs: prep
    accelerator: v4-8
    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [32], epochs: 100, batch: 64,
           optimizer: sgd, lr: 0.1, seed: 3, max_steps: '${params.steps}',
           checkpoint_every: 100}
EOF
# the preemption pipeline: checkpoints only when asked to stop (and at the end)
cat >long.yaml <<'EOF'
name: longtrain
params:
  steps: {type: int, default: 200}
  model: {type: string, default: m}
steps:
  - name: prep
    type: data_prep
    with: {source: csv, path: data.csv, csv_label: label, test_fraction: 0.2, shards: 2, seed: 7}
  - name: train
    type: train
    needs: prep
    accelerator: v4-8
    executor: local
    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [32], epochs: 1000, batch: 64,
           optimizer: sgd, lr: 0.1, seed: 3, max_steps: '${params.steps}',
           checkpoint_every: 1000000}
  - name: register
    type: register
    needs: train
    with: {model_name: '${params.model}', bundle: '${steps.train.outputs.bundle}'}
EOF
"$bin" run p.yaml --plain --param steps=10 >warm.out 2>&1 || fail "the warm-up run failed"

# -- two runs at once: one holds the pool, the other waits with its reason, both finish
"$bin" run p.yaml --plain --param steps=2500 >a.out 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do
  n=$("$bin" slices --json | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["recorded"]["running"]))')
  [[ $n == 1 ]] && break
  sleep 0.05
done
[[ $n == 1 ]] || fail "the first run never held its slice"
"$bin" run p.yaml --plain --param steps=2600 >b.out 2>&1 &
pids+=($!)
reason=
for _ in $(seq 1 200); do
  reason=$("$bin" slices --json | $PY -c 'import json,sys
w = json.load(sys.stdin)["recorded"]["waiting"]
print(w[0]["reason"] if w else "")')
  [[ -n $reason ]] && break
  sleep 0.05
done
[[ $reason == *"needs 2x2x1"* ]] || fail "the second run did not wait with a reason (got '$reason')"
wait "${pids[0]}" || fail "run a failed"
wait "${pids[1]}" || fail "run b failed"
pids=()

$PY - "$TPUFLOW_HOME/tpuflow.db" <<'EOF' || fail "slice_jobs rows overlap or are missing"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT run_id, pool, box_x, box_y, box_z, box_a, box_b, box_c, started_at, "
                  "finished_at, queued_at FROM slice_jobs WHERE box_a IS NOT NULL").fetchall()
assert len(rows) == 3, rows
for r in rows:
    assert r[9] is not None, ("a row was left open", r)
def chips(r):
    return {(r[2] + i, r[3] + j, r[4] + k) for i in range(r[5]) for j in range(r[6]) for k in range(r[7])}
for i, a in enumerate(rows):
    for b in rows[i + 1:]:
        if a[1] == b[1] and chips(a) & chips(b):
            assert a[9] <= b[8] or b[9] <= a[8], ("two runs held the same chips at once", a, b)
# A run waited when it asked before another row let go of the pool and started only after:
# the order of events, not a duration, so a loaded machine cannot make it flaky.
waited = [r for r in rows
          if any(o is not r and r[10] < o[9] <= r[8] for o in rows)]
assert len(waited) == 1, ("exactly one run should have waited for the other's release", rows)
print("it_pool: two runs, one pool: no chip held twice; one waited %.1f s" % (waited[0][8] - waited[0][10]))
EOF

# -- preemption between daemon-owned runs: the victim checkpoints, waits, resumes there, and
# ends bit-identical
start_daemon
"$bin" run long.yaml --plain --param steps=30000 --param model=victim --priority 2 \
  >victim.out 2>&1 &
vpid=$!; pids+=($vpid)
for _ in $(seq 1 400); do
  p=$($PY - "$TPUFLOW_HOME/tpuflow.db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
r = db.execute("SELECT s.progress FROM steps s JOIN runs r ON r.id = s.run_id WHERE "
               "r.pipeline='longtrain' AND s.name='train' AND s.state='running'").fetchone()
print(1 if r and r[0] else 0)
EOF
)
  [[ $p == 1 ]] && break
  sleep 0.05
done
[[ $p == 1 ]] || fail "the victim never reported training progress"
"$bin" run long.yaml --plain --param steps=300 --param model=urgent --priority 8 \
  >urgent.out 2>&1 || fail "the urgent run failed"
wait "$vpid" || fail "the preempted run did not finish"
stop_daemon
TPUFLOW_HOME=$dir/ref "$bin" run long.yaml --plain --param steps=30000 --param model=victim \
  >ref.out 2>&1 || fail "the uninterrupted reference run failed"

$PY - "$TPUFLOW_HOME" "$dir/ref" "$dlog" <<'EOF' || fail "preemption did not go as it should"
import sqlite3, sys, os
home, ref = sys.argv[1], sys.argv[2]
db = sqlite3.connect(home + "/tpuflow.db")
victim = db.execute("SELECT id FROM runs WHERE pipeline='longtrain' AND priority=2").fetchone()[0]
urgent = db.execute("SELECT id FROM runs WHERE pipeline='longtrain' AND priority=8").fetchone()[0]
for run in (victim, urgent): # driven by the daemon, not by the processes that submitted them
    assert "run '%s' started" % run in open(sys.argv[3]).read(), (run, "not the daemon's")
att = db.execute("SELECT n, state, failure_class, error FROM attempts WHERE run_id=? AND "
                 "step='train' ORDER BY n", (victim,)).fetchall()
assert len(att) == 2, att
assert att[0][1:3] == ("failed", "preempted"), att
assert urgent in att[0][3] and "checkpoint written there" in att[0][3], att
assert att[1][1] == "succeeded", att
stopped = int(att[0][3].split("cancelled at step ")[1].split()[0])
assert 0 < stopped < 30000, att
for run in (victim, urgent):
    st = db.execute("SELECT state FROM runs WHERE id=?", (run,)).fetchone()[0]
    assert st == "succeeded", (run, st)
    n = db.execute("SELECT count(*) FROM model_versions WHERE run_id=?", (run,)).fetchone()[0]
    assert n == 1, (run, n)
# the victim held the pool, gave it to the urgent run, and got it back: never at once
rows = db.execute("SELECT run_id, attempt, started_at, finished_at, reclaim_class FROM slice_jobs "
                  "WHERE run_id IN (?, ?) AND box_a IS NOT NULL ORDER BY started_at",
                  (victim, urgent)).fetchall()
assert [(r[0], r[1]) for r in rows] == [(victim, 1), (urgent, 1), (victim, 2)], rows
assert rows[0][4] == "preempted", rows
assert rows[0][3] <= rows[1][2] and rows[1][3] <= rows[2][2], rows
# the resumed attempt started from the checkpoint the preempted one wrote
log = open("%s/objects/runs/%s/train/logs/attempt-2.log" % (home, victim)).read()
assert '"event":"resume","step":%d' % stopped in log.replace(" ", ""), log[-2000:]
def weights(h, run):
    return open("%s/objects/runs/%s/train/bundle/model.safetensors" % (h, run), "rb").read()
refdb = sqlite3.connect(ref + "/tpuflow.db")
refrun = refdb.execute("SELECT id FROM runs WHERE pipeline='longtrain'").fetchone()[0]
assert weights(home, victim) == weights(ref, refrun), "weights differ from the uninterrupted run"
print("it_pool: preempted at step %d, resumed there; final weights identical to the "
      "uninterrupted run" % stopped)
EOF

# -- a chip fails under a training: requeued onto healthy chips, same final weights
# (30000 steps: long enough that the failure lands mid-training on a fast or a loaded machine)
export TPUFLOW_POOLS=v4:2x2x2 TPUFLOW_HOME=$dir/chips
start_daemon
"$bin" run long.yaml --plain --param steps=30000 --param model=victim >chip.out 2>&1 &
vpid=$!; pids+=($vpid)
box=
for _ in $(seq 1 400); do
  box=$($PY - "$TPUFLOW_HOME/tpuflow.db" <<'EOF'
import sqlite3, sys, os
if not os.path.exists(sys.argv[1]):
    sys.exit(0)
db = sqlite3.connect(sys.argv[1])
r = db.execute("SELECT j.box_x, j.box_y, j.box_z FROM slice_jobs j JOIN steps s ON "
               "s.run_id = j.run_id AND s.name = j.step WHERE j.box_a IS NOT NULL AND "
               "j.finished_at IS NULL AND s.progress IS NOT NULL").fetchone()
print("%d,%d,%d" % r if r else "")
EOF
)
  [[ -n $box ]] && break
  sleep 0.05
done
[[ -n $box ]] || fail "the training never held a slice"
"$bin" slices fail "v4:$box" >/dev/null || fail "slices fail v4:$box"
wait "$vpid" || fail "the run with a failed chip did not finish"
stop_daemon
$PY - "$TPUFLOW_HOME" "$dir/ref" "$box" "$dlog" <<'EOF' || fail "the chip failure did not go as it should"
import sqlite3, sys
home, ref, box = sys.argv[1], sys.argv[2], tuple(int(v) for v in sys.argv[3].split(","))
db = sqlite3.connect(home + "/tpuflow.db")
run = db.execute("SELECT id FROM runs WHERE pipeline='longtrain'").fetchone()[0]
assert "run '%s' started" % run in open(sys.argv[4]).read(), (run, "not the daemon's")
att = db.execute("SELECT n, state, failure_class, error FROM attempts WHERE run_id=? AND "
                 "step='train' ORDER BY n", (run,)).fetchall()
assert [a[1:3] for a in att] == [("failed", "infra"), ("succeeded", None)], att
assert "failed" in att[0][3] and "checkpoint written there" in att[0][3], att
rows = db.execute("SELECT box_x, box_y, box_z, reclaim_class FROM slice_jobs WHERE run_id=? "
                  "ORDER BY attempt", (run,)).fetchall()
assert rows[0][:3] == box and rows[0][3] == "infra", rows
assert rows[1][2] != box[2], ("placed again on the failed chip's half", rows)
refdb = sqlite3.connect(ref + "/tpuflow.db")
refrun = refdb.execute("SELECT id FROM runs WHERE pipeline='longtrain'").fetchone()[0]
w = lambda h, r: open("%s/objects/runs/%s/train/bundle/model.safetensors" % (h, r), "rb").read()
assert w(home, run) == w(ref, refrun), "weights differ from the uninterrupted run"
print("it_pool: chip %s failed under the training: requeued to z=%d, same final weights"
      % (sys.argv[3], rows[1][2]))
EOF
"$bin" slices repair "v4:$box" >/dev/null || fail "slices repair v4:$box"
echo "it_pool: passed"
