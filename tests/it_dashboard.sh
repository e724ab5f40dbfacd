#!/usr/bin/env bash
# Integration: the dashboard in Debian's Chromium (tests/dashboard.mjs, playwright-core)
# against a real `tpuflow daemon` on a temporary home and a free loopback port, holding real
# runs made through the API:
#  - the demo pipeline (Fashion-MNIST, one epoch; a param given, a project, labels): curves,
#    checkpoints, a model version;
#  - a failed run whose step was retried;
#  - a 1,000-step shell DAG (one root, 998 in one level, one join);
#  - a preempted run: a priority-2 training on a pool of one v4-8 slice loses it to a
#    priority-8 run, checkpoints, waits and finishes.
# The browser then opens every view with a read, a trigger and an admin token (what each may
# do), watches the runs list update from the event stream (no polling, a reconnect with
# Last-Event-ID), triggers a run of a registered pipeline from the form and follows it to its
# end without a reload, triggers one more and cancels it, and checks the slice map with a chip
# marked failed; then the daemon is started again with --auth none and the page is used without
# a token. Screenshots go to BUILD/screenshots/. Skipped (77) without node, playwright-core or /usr/bin/chromium.
. "$(dirname "$0")/lib.sh" it_dashboard dashboard
if ! command -v node >/dev/null || [[ ! -x /usr/bin/chromium ]] ||
  [[ ! -f node_modules/playwright-core/package.json ]]; then
  echo "it_dashboard: node, /usr/bin/chromium or node_modules/playwright-core missing (make deps; scripts/deps.sh test)"
  exit 77
fi
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
pids=()
export PIDS=$dir/pids # daemons the browser test starts again (tests/dashboard.mjs)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [[ -f $PIDS ]] && while read -r p; do kill "$p" 2>/dev/null; done <"$PIDS"
  rm -rf "$dir"
}
trap cleanup EXIT
export TPUFLOW_POOLS=v4:2x2x1 # one v4-8 slice: a second training waits or preempts
t0=$SECONDS

tok() { "$bin" tokens create --home "$H" --name "$1" --scope "$1" --json |
  $PY -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
READ=$(tok read) && TRIGGER=$(tok trigger) && ADMIN=$(tok admin) || fail "tokens create"

start_daemon() {
  rm -f "$H/daemon.json"
  TPUFLOW_LOG=info "$bin" daemon --home "$H" --listen 127.0.0.1:0 --grace 5s "$@" \
    >>"$dir/d.log" 2>&1 &
  dpid=$!
  pids+=($dpid)
  for _ in $(seq 1 200); do [[ -s $H/daemon.json ]] && break; sleep 0.05; done
  url=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json") ||
    fail "the daemon did not start"
}
start_daemon
# through the CLI (handed to the daemon: trigger cli) or the API (trigger api)
submit() { "$bin" run "$@" --home "$H" --detach; }
api_submit() { # FILE [JSON]: POST /api/v1/runs with its text (and the members of JSON)
  $PY -c 'import json, sys, urllib.request
url, tok, path, extra = sys.argv[1:]
req = urllib.request.Request(url + "/api/v1/runs", method="POST",
    data=json.dumps({"yaml": open(path).read(), **json.loads(extra)}).encode(),
    headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req))["id"])' "$url" "$TRIGGER" "$1" "${2:-{\}}"
}
wait_final() { # RUN: waits for a final state, prints it
  for _ in $(seq 1 2400); do
    s=$(curl -sf -H "Authorization: Bearer $READ" "$url/api/v1/runs/$1" |
      $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $s in succeeded | failed | interrupted) echo "$s"; return 0 ;; esac
    sleep 0.25
  done
  fail "run $1 did not end"
}

cd "$dir" || exit 1
csv_data data.csv
cat >flaky.yaml <<'EOF'
name: flaky
steps:
  - name: hello
    type: shell
    with: {argv: [/bin/sh, -c, "echo hello from the first step"]}
  - name: boom
    type: shell
    needs: [hello]
    retries: {limit: 2, backoff: 0.1s, on: [error]}
    with: {argv: [/bin/sh, -c, "echo trying; echo it breaks >&2; exit 3"]}
  - name: after
    type: shell
    needs: [boom]
    with: {argv: [/bin/true]}
EOF
$PY - <<'EOF'
lines = ["name: wide", "steps:", "  - {name: root, type: shell, with: {argv: [/bin/true]}}"]
lines += ["  - {name: s%03d, type: shell, needs: [root], with: {argv: [/bin/true]}}" % i
          for i in range(998)]
lines += ["  - name: join", "    type: shell",
          "    needs: [" + ", ".join("s%03d" % i for i in range(998)) + "]",
          "    with: {argv: [/bin/echo, joined]}"]
open("wide.yaml", "w").write("\n".join(lines) + "\n")
EOF
# a training bounded by its `steps` (the dashboard test starts one with 10^8 that runs until it is
# cancelled), checkpointing only when asked:
# 50 steps an epoch, so its step bound, not its epochs, ends it
cat >long.yaml <<EOF
name: longtrain
params:
  steps: {type: int, default: 30000}
  model: {type: string, default: victim}
steps:
  - name: prep
    type: data_prep
    with: {source: csv, path: $dir/data.csv, csv_label: label, test_fraction: 0.2, shards: 2, seed: 7}
  - name: train
    type: train
    needs: prep
    accelerator: v4-8
    executor: local
    cache: false
    with: {dataset: '\${steps.prep.outputs.dataset}', hidden: [32], epochs: 10000000, batch: 64,
           optimizer: sgd, lr: 0.1, seed: 3, max_steps: '\${params.steps}',
           checkpoint_every: 1000000}
  - name: register
    type: register
    needs: train
    with: {model_name: '\${params.model}', bundle: '\${steps.train.outputs.bundle}'}
EOF
# what the page triggers and follows: output over a few seconds, then a short training
cat >live.yaml <<EOF
name: live
params:
  lines: {type: int, default: 6}
steps:
  - name: talk
    type: shell
    with: {argv: [/bin/sh, -c, 'i=0; while [ \$i -lt \${params.lines} ]; do i=\$((i+1)); echo "line \$i"; sleep 0.4; done']}
  - name: prep
    type: data_prep
    needs: [talk]
    with: {source: csv, path: $dir/data.csv, csv_label: label, test_fraction: 0.2, shards: 2, seed: 7}
  - name: train
    type: train
    needs: prep
    accelerator: v4-8
    cache: false
    with: {dataset: '\${steps.prep.outputs.dataset}', hidden: [16], epochs: 3, batch: 32,
           optimizer: sgd, lr: 0.1, seed: 3, checkpoint_every: 100}
EOF

# the demo with the facts a run page can show (params, project, labels: the README picture)
DEMO=$(submit "$root/pipelines/fashion-mnist.yaml" --param epochs=1 --project vision \
  --label dataset=fashion-mnist --label owner=ml-team) || fail "submit demo"
FLAKY=$(api_submit flaky.yaml '{"labels": {"sha": "abc123", "team": "vision"}, "project": "vision", "priority": 6}') && WIDE=$(submit wide.yaml) || fail "submit"
[[ $(wait_final "$DEMO") == succeeded ]] || fail "the demo run did not succeed"
[[ $(wait_final "$FLAKY") == failed ]] || fail "the flaky run did not fail"
# preemption: the victim trains, then a more urgent run takes its slice
VICTIM=$(submit long.yaml --priority 2) || fail "submit victim"
for _ in $(seq 1 400); do
  curl -sf -H "Authorization: Bearer $READ" "$url/api/v1/runs/$VICTIM" |
    $PY -c 'import json,sys
s = [s for s in json.load(sys.stdin)["steps"] if s["name"] == "train"][0]
sys.exit(0 if s["state"] == "running" and s["progress"] else 1)' && break
  sleep 0.1
done
URGENT=$(submit long.yaml --param steps=300 --priority 8) || fail "submit urgent"
[[ $(wait_final "$URGENT") == succeeded ]] || fail "the urgent run did not succeed"
[[ $(wait_final "$VICTIM") == succeeded ]] || fail "the preempted run did not finish"
[[ $(wait_final "$WIDE") == succeeded ]] || fail "the 1,000-step run did not succeed"
# the victim model in production (v1) with v2 as a 25 % canary: the model page's serving table
cat >shipit.yaml <<'EOF'
name: shipit
steps:
  - {name: prod, type: deploy, with: {model_name: victim, version: 1, alias: production}}
  - {name: canary, type: deploy, needs: [prod], with: {model_name: victim, version: 2, alias: production, canary_percent: 25}}
EOF
SHIP=$(submit shipit.yaml) && [[ $(wait_final "$SHIP") == succeeded ]] || fail "the deploy run"
# a step whose attempts ran as Slurm jobs: the attempt rows as orchestrator/kinds_slurm.c
# writes them (job id, nodes, Slurm's state), set on a real run's rows here; tests/it_slurm.sh
# checks the API against a real cluster
printf 'name: onslurm\nsteps:\n  - {name: work, type: shell, retries: {limit: 1, backoff: 0.1s}, with: {argv: [/bin/true]}}\n' >onslurm.yaml
SLURM=$(submit onslurm.yaml) && [[ $(wait_final "$SLURM") == succeeded ]] || fail "the onslurm run"
$PY - "$H/tpuflow.db" "$SLURM" <<'PY' || fail "the Slurm attempt rows"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
with db:
    db.execute("UPDATE attempts SET state='failed', failure_class='preempted', exit_code=NULL, slurm_job=4241,"
               " slurm_nodes='tpu-node1', slurm_state='PREEMPTED' WHERE run_id=? AND n=1", (sys.argv[2],))
    db.execute("INSERT INTO attempts(run_id, step, n, state, started_at, finished_at, slurm_job,"
               " slurm_nodes, slurm_state) SELECT run_id, step, 2, 'succeeded', finished_at + 0.1,"
               " finished_at + 0.2, 4242, 'tpu-node[1-2]', 'COMPLETED' FROM attempts WHERE run_id=? AND n=1",
               (sys.argv[2],))
    db.execute("UPDATE steps SET attempts=2 WHERE run_id=?", (sys.argv[2],))
PY
echo "it_dashboard: runs ready in $((SECONDS - t0)) s"
# the pipelines the form offers: the registered ones (live and longtrain), not every text a
# run was made from
"$bin" pipelines add live.yaml --home "$H" >/dev/null &&
  "$bin" pipelines add long.yaml --home "$H" >/dev/null || fail "pipelines add"

cd "$root" || exit 1
printf 'name: meanwhile\nsteps:\n  - {name: a, type: shell, with: {argv: [/bin/true]}}\n' \
  >"$dir/meanwhile.yaml"
export SHOTS=$root/$BUILD/screenshots URL=$url READ TRIGGER ADMIN DEMO FLAKY WIDE VICTIM URGENT SLURM \
  BIN=$bin HOME_DIR=$H MEANWHILE=$dir/meanwhile.yaml DAEMON_LOG=$dir/d.log
node tests/dashboard.mjs auth || fail "the browser test failed (token scopes)"
# the same page on a daemon that asks for no token (the browser test started the one serving)
dpid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$H/daemon.json") &&
  kill "$dpid" || fail "no daemon to stop"
for _ in $(seq 1 400); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.05; done
# An orphaned run for the page to show (running, the process that drove it gone): this
# daemon drives one run at a time (max_runs=1) and is busy with a run waiting for a gate, so
# it cannot take up a run made by the CLI in its own process (--embedded) whose process and
# step are killed while the step runs. Once the gate opens, the daemon takes it up.
echo max_runs=1 >"$H/daemon.conf"
start_daemon --auth none
gate=$dir/orphan-gate
printf 'name: gated\nsteps:\n  - {name: wait, type: shell, with: {argv: [/bin/sh, -c, "while [ ! -e %s ]; do sleep 0.1; done"]}}\n' \
  "$gate" >"$dir/gated.yaml"
BLOCKER=$(submit "$dir/gated.yaml") || fail "submit the blocker"
running() { # RUN: its state and, once its step runs, the step's process group
  curl -sf "$url/api/v1/runs/$1" | $PY -c 'import json,sys
r = json.load(sys.stdin); a = r["steps"][0]["attempts_detail"]
print(r["state"], a[-1].get("pgid") or 0 if a and a[-1]["state"] == "running" else 0)'
}
for _ in $(seq 1 400); do [[ $(running "$BLOCKER") == "running "[1-9]* ]] && break; sleep 0.1; done
"$bin" run "$dir/gated.yaml" --home "$H" --embedded >/dev/null 2>&1 &
opid=$!
disown "$opid" # killed below: no job report
pids+=($opid)
ORPHAN= pgid=0
for _ in $(seq 1 400); do
  ORPHAN=$(curl -sf "$url/api/v1/runs?pipeline=gated" | $PY -c 'import json,sys
print(" ".join(r["id"] for r in json.load(sys.stdin)["items"] if r["id"] != sys.argv[1]))' "$BLOCKER")
  [[ -n $ORPHAN ]] && read -r _ pgid < <(running "$ORPHAN") && ((pgid > 0)) && break
  sleep 0.1
done
((pgid > 0)) || fail "the CLI's run did not start its step"
kill -9 "$opid" && kill -9 -- "-$pgid" || fail "could not kill the CLI's run"
[[ $(curl -sf "$url/api/v1/runs?state=orphaned" | $PY -c 'import json,sys
print(" ".join(r["id"] for r in json.load(sys.stdin)["items"]))') == "$ORPHAN" ]] || fail "run $ORPHAN is not orphaned"
URL=$url ORPHAN=$ORPHAN node tests/dashboard.mjs none || fail "the browser test failed (--auth none)"
touch "$gate"
[[ $(wait_final "$BLOCKER") == succeeded && $(wait_final "$ORPHAN") == succeeded ]] ||
  fail "the orphaned run was not taken up once the daemon had room"
echo "it_dashboard: passed in $((SECONDS - t0)) s"
