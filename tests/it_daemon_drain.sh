#!/usr/bin/env bash
# Integration: a train step driven by `tpuflow daemon` when the daemon is drained (SIGTERM)
# (docs/daemon.md, Signals):
#  - the step's process gets SIGTERM and writes a checkpoint at the step it reached; its
#    attempt ends cancelled, the run interrupted and marked for the next daemon; exit 0;
#  - the next daemon continues the run: the train step's next attempt resumes from that
#    checkpoint (its log says so, at that step), the run succeeds, and the final weights are
#    byte-identical to an uninterrupted embedded run with the same seed.
# Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_daemon_drain daemon-drain
export TPUFLOW_LOG=info TPUFLOW_POOLS=v4:2x2x1
cd "$dir"

csv_data data.csv
# checkpoints only when asked to stop (and at the end)
cat >long.yaml <<'EOF'
name: drained
steps:
  - name: prep
    type: data_prep
    with: {source: csv, path: data.csv, csv_label: label, test_fraction: 0.2, shards: 2, seed: 7}
  - name: train
    type: train
    needs: prep
    accelerator: v4-8
    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [32], epochs: 1000, batch: 64,
           optimizer: sgd, lr: 0.1, seed: 3, max_steps: 10000, checkpoint_every: 1000000}
EOF

start_daemon --grace 60s
run=$("$bin" run long.yaml --home "$H" --detach) || fail "run --detach"
for _ in $(seq 1 600); do
  p=$(python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
r = db.execute("SELECT progress FROM steps WHERE run_id=? AND name=? AND state=?",
               (sys.argv[2], "train", "running")).fetchone()
print(1 if r and r[0] else 0)' "$H/tpuflow.db" "$run")
  [[ $p == 1 ]] && break
  sleep 0.1
done
[[ $p == 1 ]] || fail "the train step never reported progress"
kill -TERM "$dpid"; wait "$dpid"; rc=$?; dpid=
[[ $rc == 0 ]] || fail "the drained daemon exited $rc"
python3 - "$H" "$run" <<'PY' || fail "the drain did not go as it should"
import sqlite3, sys, os
home, run = sys.argv[1:3]
db = sqlite3.connect(home + "/tpuflow.db")
st, resume = db.execute("SELECT state, resume_on_start FROM runs WHERE id=?", (run,)).fetchone()
assert (st, resume) == ("interrupted", 1), (st, resume)
att = db.execute("SELECT n, state, failure_class, error FROM attempts WHERE run_id=? AND "
                 "step='train'", (run,)).fetchall()
assert len(att) == 1 and att[0][1] == "cancelled", att
assert "checkpoint written there" in (att[0][3] or ""), att
ck = os.path.join(home, "objects/runs/%s/train/ckpt" % run)
manifests = [d for d in os.listdir(ck) if os.path.exists(os.path.join(ck, d, "manifest.json"))]
assert len(manifests) == 1, os.listdir(ck)
print("it_daemon_drain: drained: train checkpointed (%s), run interrupted and marked" % manifests[0])
PY
[[ $? == 0 ]] || exit 1

start_daemon --grace 60s
"$bin" runs watch "$run" --home "$H" --plain >"$dir/watch.log" 2>&1 ||
  fail "the next daemon did not finish the run: $(tail -5 "$dir/watch.log")"
kill -TERM "$dpid"; wait "$dpid" || fail "the second daemon's exit"; dpid=
TPUFLOW_POOLS= "$bin" run long.yaml --home "$dir/ref" --embedded --plain >"$dir/ref.log" 2>&1 ||
  fail "the uninterrupted reference run failed: $(tail -5 "$dir/ref.log")"
python3 - "$H" "$run" "$dir/ref" <<'PY' || fail "the resume did not go as it should"
import sqlite3, sys
home, run, ref = sys.argv[1:4]
db = sqlite3.connect(home + "/tpuflow.db")
att = db.execute("SELECT n, state, error FROM attempts WHERE run_id=? AND step='train' ORDER BY n",
                 (run,)).fetchall()
assert [a[1] for a in att] == ["cancelled", "succeeded"], att
stopped = int(att[0][2].split("cancelled at step ")[1].split()[0])
log = open("%s/objects/runs/%s/train/logs/attempt-2.log" % (home, run)).read()
assert '"event":"resume","step":%d' % stopped in log.replace(" ", ""), log[-2000:]
refdb = sqlite3.connect(ref + "/tpuflow.db")
refrun = refdb.execute("SELECT id FROM runs").fetchone()[0]
w = lambda h, r: open("%s/objects/runs/%s/train/bundle/model.safetensors" % (h, r), "rb").read()
assert w(home, run) == w(ref, refrun), "weights differ from the uninterrupted run"
print("it_daemon_drain: the next daemon resumed the train step at step %d; final weights "
      "identical to an uninterrupted run" % stopped)
PY
[[ $? == 0 ]] || exit 1
echo "it_daemon_drain: ok"
