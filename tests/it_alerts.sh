#!/usr/bin/env bash
# Integration: alerting hooks end to end (docs/alerts.md), with real receivers on 127.0.0.1:
#  - Standard Webhooks: every alert of a failing run arrives signed; the npm package
#    `standardwebhooks` verifies each signature, and refuses the same message with its body
#    tampered with
#  - secret rotation: a hook holding the new and the old secret sends both signatures; the
#    npm package verifies the message with either secret alone
#  - Slack: the message has the documented shape of an incoming webhook (text + blocks)
#  - Alertmanager (Debian's prometheus-alertmanager on a free port): a run_failed alert is
#    shown by its API as active, and as resolved after the next successful run
#  - a chip_failed alert (no run) stays active in an Alertmanager whose resolve_timeout is
#    3 s, posted again by the daemon (each post valid 4 x refire), for longer than one post is
#    valid, until the chip is repaired, then shows resolved
#  - durability: a `tpuflow run` killed with -9 while its alert is being posted: the alert
#    arrives after a restart (the daemon), with the same webhook-id
#  - a receiver answering 503 for a while, then 200: every alert arrives, none lost, in the
#    order they were queued, repeats carry the same id
#  - a receiver that never answers: the alert ends dead-lettered, and redeliver queues it
#  - a daemon killed with -9: the next daemon raises daemon_unclean_stop (not after a clean stop)
# Stops only the processes it started.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
[[ -x $bin ]] || { echo "it_alerts: build first (make)"; exit 1; }
command -v node >/dev/null && [[ -d node_modules/standardwebhooks ]] ||
  { echo "it_alerts: SKIPPED: node and the npm packages are needed (make deps)"; exit 77; }
am_bin=$(command -v prometheus-alertmanager || true)
[[ -n $am_bin ]] || { echo "it_alerts: SKIPPED: prometheus-alertmanager is not installed (scripts/deps.sh test)"; exit 77; }
dir=$(mktemp -d /tmp/tpuflow-it-alerts.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "it_alerts: FAILED: $*"
  for f in "$dir"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -15 "$f"; }; done
  exit 1
}
H=$dir/home
mkdir -p "$H"
export TPUFLOW_LOG=info
export WH_SECRET=whsec_$(head -c 32 /dev/urandom | base64)
export WH_SECRET_OLD=whsec_$(head -c 24 /dev/urandom | base64)
# fast retries for the test (the real defaults are in docs/alerts.md); `tpuflow run` waits up
# to `drain` for its alerts, which under load may take more than a moment
cat >"$H/alerts.conf" <<'CONF'
backoff=0.3s
max_backoff=1s
max_attempts=6
timeout=2s
drain=30s
CONF

# ---- the receiver (node) and Alertmanager, on free loopback ports
node tests/alert_receiver.mjs "$dir/recv.jsonl" >"$dir/recv.port" 2>"$dir/recv.log" &
pids+=($!)
for _ in $(seq 1 100); do [[ -s $dir/recv.port ]] && break; sleep 0.05; done
rport=$(head -1 "$dir/recv.port")
[[ $rport =~ ^[0-9]+$ ]] || fail "the receiver did not start"
R=http://127.0.0.1:$rport
# start_am NAME PORT [GLOBAL]: an Alertmanager on PORT whose configuration (DIR/NAME.yml)
# routes everything to a receiver that sends nothing, with GLOBAL as its global section
start_am() {
  { [[ -n ${3:-} ]] && printf 'global:\n  %s\n' "$3"
    printf 'route:\n  receiver: nobody\n  group_wait: 1s\nreceivers:\n  - name: nobody\n'
  } >"$dir/$1.yml"
  "$am_bin" --config.file="$dir/$1.yml" --storage.path="$dir/$1" \
    --web.listen-address="127.0.0.1:$2" --cluster.listen-address= >"$dir/$1.log" 2>&1 &
  pids+=($!)
}
read -r amport am2port < <(scripts/free-ports.sh 2)
start_am am "$amport"
AM=http://127.0.0.1:$amport
# a second one that ends an alert not posted again within 3 s (its default is 5 minutes)
start_am am2 "$am2port" "resolve_timeout: 3s"
AM2=http://127.0.0.1:$am2port
for _ in $(seq 1 200); do curl -sf "$AM/-/ready" >/dev/null && curl -sf "$AM2/-/ready" >/dev/null && break; sleep 0.1; done
curl -sf "$AM/-/ready" >/dev/null || fail "Alertmanager did not become ready"
curl -sf "$AM2/-/ready" >/dev/null || fail "the second Alertmanager did not become ready"

# jq-like helpers in python: count lines of the receiver's log matching a condition
recv() { python3 - "$dir/recv.jsonl" "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if len(sys.argv) > 1 else []
expr = sys.argv[2]
print(eval(expr, {"rows": rows, "json": json}))
PY
}
alerts_json() { "$bin" alerts list --home "$H" --json --limit 1000 "$@"; }
# waits until python expression $1 over the outbox (`a`, newest first) holds
wait_outbox() {
  for _ in $(seq 1 300); do
    alerts_json | python3 -c "import json,sys; a=json.load(sys.stdin); sys.exit(0 if ($1) else 1)" && return 0
    sleep 0.1
  done
  return 1
}
# am_state URL MATCHER...: the first alert an Alertmanager's API lists for the matchers, as
# "none", "resolved" (its endsAt passed) or its state, then its endsAt and its run annotation
am_state() {
  local url=$1 args=() m
  shift
  for m in "$@"; do args+=(--data-urlencode "filter=$m"); done
  curl -sfG "${args[@]}" "$url/api/v2/alerts" | python3 -c '
import json, sys, datetime
a = json.load(sys.stdin)
if not a:
    print("none"); sys.exit()
ends = datetime.datetime.fromisoformat(a[0]["endsAt"].replace("Z", "+00:00"))
now = datetime.datetime.now(datetime.timezone.utc)
print("resolved" if ends <= now else a[0]["status"]["state"], a[0]["endsAt"], a[0]["annotations"].get("run", ""))'
}
# waits until the alert that command $1 reads from an Alertmanager (am_alert, am2_chip) is gone
# or resolved (endsAt passed); fails with message $2 and the last state it read otherwise
wait_am_gone() {
  local state
  for _ in $(seq 1 50); do
    state=$("$1")
    [[ $state == none* || $state == resolved* ]] && return 0
    sleep 0.2
  done
  fail "$2: $state"
}

cat >"$dir/flaky.yaml" <<YAML
name: flaky
steps:
  - name: work
    type: shell
    retries: {limit: 1, backoff: 0.1}
    with: {argv: [sh, -c, 'test ! -e $dir/break']}
YAML

# ---- hooks
"$bin" hooks add oncall --home "$H" --url "$R/std/ok" --format standard --secret-env WH_SECRET \
  --on run_failed,step_retried,step_failed >"$dir/cli.log" 2>&1 || fail "hooks add oncall"
"$bin" hooks add team --home "$H" --url "$R/slack/ok" --format slack --on run_failed \
  >>"$dir/cli.log" 2>&1 || fail "hooks add team"
"$bin" hooks add am --home "$H" --url "$AM/api/v2/alerts" --format alertmanager --on run_failed \
  >>"$dir/cli.log" 2>&1 || fail "hooks add am"
"$bin" hooks add bad --home "$H" --url http://example.com/x --format slack 2>"$dir/deny.log" &&
  fail "a hook to a host not on the allowlist was accepted"
grep -q "allowlist" "$dir/deny.log" || fail "the allowlist refusal does not say why: $(cat "$dir/deny.log")"
grep -q "$WH_SECRET" <<<"$("$bin" hooks list --home "$H" --json)" && fail "hooks list shows the secret"
# the database and its WAL (commits stay there until a checkpoint)
grep -qa "${WH_SECRET#whsec_}" "$H/tpuflow.db" "$H/tpuflow.db-wal" 2>/dev/null &&
  fail "the secret is in the database"
"$bin" hooks test oncall --home "$H" >"$dir/test.log" 2>&1 || fail "hooks test: $(cat "$dir/test.log")"

# ---- secret rotation: both signatures in webhook-signature, each receiver verifies with its own
export WH_ROTATING="$WH_SECRET $WH_SECRET_OLD"
"$bin" hooks add rot-new --home "$H" --url "$R/std/rot" --format standard --secret-env WH_ROTATING \
  >>"$dir/cli.log" 2>&1 || fail "hooks add rot-new"
"$bin" hooks add rot-old --home "$H" --url "$R/std-old/rot" --format standard --secret-env WH_ROTATING \
  >>"$dir/cli.log" 2>&1 || fail "hooks add rot-old"
"$bin" hooks test rot-new --home "$H" >>"$dir/test.log" 2>&1 || fail "hooks test rot-new: $(cat "$dir/test.log")"
"$bin" hooks test rot-old --home "$H" >>"$dir/test.log" 2>&1 || fail "hooks test rot-old: $(cat "$dir/test.log")"
[[ $(recv "sum(1 for r in rows if r['path'] in ('/std/rot', '/std-old/rot') and r['verified'] and len(r['signature'].split(' ')) == 2)") == 2 ]] ||
  fail "a rotating secret's message did not verify with each secret: $(recv "[(r['path'], r['problem']) for r in rows if 'rot' in r['path']]")"
"$bin" hooks rm rot-new --home "$H" >/dev/null && "$bin" hooks rm rot-old --home "$H" >/dev/null
echo "it_alerts: secret rotation: both signatures sent, each secret verifies"

# ---- a failing run, embedded: Standard Webhooks, Slack, Alertmanager
touch "$dir/break"
"$bin" run "$dir/flaky.yaml" --home "$H" --embedded --plain >"$dir/run1.log" 2>&1
[[ $? == 1 ]] || fail "the failing run did not exit 1"
run1=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
wait_outbox "all(x['state']=='delivered' for x in a) and len(a)==8" ||
  fail "not every alert of the failed run was delivered: $(alerts_json)"
[[ $(recv "sum(1 for r in rows if r['path']=='/std/ok' and r['verified'])") == 4 ]] ||
  fail "expected 4 verified Standard Webhooks messages (test, step_retried, step_failed, run_failed)"
[[ $(recv "sum(1 for r in rows if r['verified'] is False)") == 0 ]] || fail "a signature did not verify"
[[ $(recv "sorted(json.loads(r['body'])['type'] for r in rows if r['path']=='/std/ok')") == \
   "['run_failed', 'step_failed', 'step_retried', 'test']" ]] || fail "wrong events: $(recv "[r['body'] for r in rows]")"
# the same message with its body changed must not verify
python3 - "$dir/recv.jsonl" "$R" <<'PY' || fail "a tampered body was not refused"
import json, sys, urllib.request, urllib.error
rows = [json.loads(l) for l in open(sys.argv[1])]
r = next(r for r in rows if r["path"] == "/std/ok" and '"run_failed"' in r["body"])
def post(body):
    req = urllib.request.Request(sys.argv[2] + "/std/replay", data=body.encode(), headers={
        "webhook-id": r["id"], "webhook-timestamp": r["timestamp"],
        "webhook-signature": r["signature"], "content-type": "application/json"})
    try:
        return urllib.request.urlopen(req).status
    except urllib.error.HTTPError as e:
        return e.code
assert post(r["body"]) == 200, "the untouched message must verify"
assert post(r["body"].replace("run_failed", "run_succeeded")) == 401, "tampered body accepted"
PY
[[ $(recv "sum(1 for r in rows if r['path']=='/slack/ok' and r['status']==200)") == 1 ]] ||
  fail "the Slack message was not accepted: $(recv "[r['problem'] for r in rows if r['path'].startswith('/slack')]")"
grep -q "$run1" <<<"$(recv "[json.loads(r['body']) for r in rows if r['path']=='/slack/ok'][0]['blocks'][1]['text']['text']")" ||
  fail "the Slack message does not name the run"
# Alertmanager shows the alert firing
am_alert() { am_state "$AM" 'alertname="run_failed"' 'pipeline="flaky"'; }
state=$(am_alert)
[[ $state == active* ]] || fail "Alertmanager does not show run_failed as active: $state"
# ---- the next successful run resolves it
rm -f "$dir/break"
"$bin" run "$dir/flaky.yaml" --home "$H" --embedded --plain >"$dir/run2.log" 2>&1 || fail "the second run failed"
wait_outbox "all(x['state']=='delivered' for x in a) and any(x.get('resolves') for x in a)" ||
  fail "no resolving alert was delivered: $(alerts_json)"
wait_am_gone am_alert "Alertmanager still shows the alert after the successful run"
# Alertmanager keeps a resolved alert for a while; its endsAt is then in the past
echo "it_alerts: standard, slack and alertmanager formats ok"

# ---- durability: killed with -9 while posting; the daemon delivers after the restart
"$bin" hooks rm team --home "$H" >/dev/null && "$bin" hooks rm am --home "$H" >/dev/null
"$bin" hooks add oncall --home "$H" --url "$R/std/hang/1" --format standard --secret-env WH_SECRET \
  --on run_failed >/dev/null || fail "hooks add (hang)"
touch "$dir/break"
before=$(alerts_json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
"$bin" run "$dir/flaky.yaml" --home "$H" --embedded --plain >"$dir/run3.log" 2>&1 &
rpid=$!; pids+=($rpid)
for _ in $(seq 1 200); do
  [[ $(recv "sum(1 for r in rows if r['path']=='/std/hang/1')") -ge 1 ]] && break
  sleep 0.05
done
[[ $(recv "sum(1 for r in rows if r['path']=='/std/hang/1')") -ge 1 ]] || fail "the alert was not being posted"
kill -KILL "$rpid"; wait "$rpid" 2>/dev/null
run3=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
grep -q '"state": "failed"' <<<"$("$bin" runs show "$run3" --home "$H" --json)" || fail "run 3 is not failed"
id3=$(alerts_json | python3 -c 'import json,sys; a=json.load(sys.stdin); print([x for x in a if x.get("run")=="'"$run3"'"][0]["msg_id"])')
grep -q '"state": *"pending"' <<<"$("$bin" alerts show "$id3" --home "$H" --json)" || fail "the alert of run 3 is not pending"
# the receiver is back; a daemon starts on the home
"$bin" hooks add oncall --home "$H" --url "$R/std/back" --format standard --secret-env WH_SECRET \
  --on run_failed,step_retried,step_failed >/dev/null
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >"$dir/d.log" 2>&1 &
dpid=$!; pids+=($dpid)
wait_outbox "[x for x in a if x['msg_id']=='$id3'][0]['state']=='delivered'" ||
  fail "the alert of the killed run was not delivered after the restart: $("$bin" alerts show "$id3" --home "$H")"
[[ $(recv "sum(1 for r in rows if r['id']=='$id3' and r['status']==200 and r['verified'])") == 1 ]] ||
  fail "the receiver did not get $id3 after the restart"
# posted to the silent receiver before the kill (more than once if its 2 s timeout passed
# first), then delivered: always the same id and the same bytes
[[ $(recv "sum(1 for r in rows if r['id']=='$id3' and r['path']=='/std/hang/1')") -ge 1 ]] ||
  fail "$id3 was not posted before the kill"
[[ $(recv "len({r['body'] for r in rows if r['id']=='$id3'})") == 1 ]] || fail "$id3 was sent with different bodies"
echo "it_alerts: kill -9 between the failure and the delivery: delivered after the restart"

# ---- a receiver answering 503 for a while, then 200 (the daemon delivers)
"$bin" hooks add oncall --home "$H" --url "$R/std/503x4/a" --format standard --secret-env WH_SECRET \
  --on run_failed,step_retried,step_failed >/dev/null
"$bin" run "$dir/flaky.yaml" --home "$H" --plain >"$dir/run4.log" 2>&1 # through the daemon
run4=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
wait_outbox "len([x for x in a if x.get('run')=='$run4'])==3 and all(x['state']=='delivered' for x in a if x.get('run')=='$run4')" ||
  fail "not every alert of run 4 was delivered: $(alerts_json)"
python3 - "$dir/recv.jsonl" "$(alerts_json)" "$run4" <<'PY' || fail "503 then 200: lost or changed alerts"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"/std/503x4/a"' in l]
outbox = [a for a in json.loads(sys.argv[2]) if a.get("run") == sys.argv[3]]
ids = {a["msg_id"] for a in outbox}
ok = {r["id"] for r in rows if r["status"] == 200}
assert ids == ok, f"delivered {ok} != outbox {ids}"
assert sum(1 for r in rows if r["status"] == 503) == 4, "expected 4 answers of 503"
by_id = {}
for r in rows:
    assert r["verified"], "a signature did not verify"
    by_id.setdefault(r["id"], set()).add(r["body"])
assert all(len(b) == 1 for b in by_id.values()), "a repeat carried another body"
assert any(sum(1 for r in rows if r["id"] == i) > 1 for i in ids), "no alert was repeated"
# one hook's alerts arrive in the order they were queued, the first held back the others
order = [r["id"] for r in rows if r["status"] == 200]
queued = [a["msg_id"] for a in sorted(outbox, key=lambda a: a["id"])]
assert order == queued, f"delivered in the order {order}, queued {queued}"
assert all(r["id"] == queued[0] for r in rows if r["status"] == 503), "a later alert was tried first"
PY
echo "it_alerts: 503 then 200: every alert arrived once acknowledged, in order, repeats with the same id"

# ---- an alert of no run stays firing while its condition lasts (the daemon posts it again)
# each post is valid 4 x refire (12 s): a re-post late by seconds on a loaded machine does
# not end it; 15 s of checks outlive the first post, and Alertmanager's resolve_timeout
echo "refire=3s" >>"$H/alerts.conf"
"$bin" hooks add am-chips --home "$H" --url "$AM2/api/v2/alerts" --format alertmanager \
  --on chip_failed >/dev/null || fail "hooks add am-chips"
am2_chip() { am_state "$AM2" 'alertname="chip_failed"' 'chip="1,2,3"'; }
"$bin" slices fail v4:1,2,3 --reason "ECC errors" --home "$H" >>"$dir/cli.log" 2>&1 || fail "slices fail"
for _ in $(seq 1 100); do [[ $(am2_chip) == active* ]] && break; sleep 0.1; done
[[ $(am2_chip) == active* ]] || fail "Alertmanager does not show chip_failed as active: $(am2_chip)"
# longer than one post is valid: still active, because the daemon posts it again
for _ in $(seq 1 15); do
  sleep 1
  state=$(am2_chip)
  [[ $state == active* ]] || fail "chip_failed ended in Alertmanager while the chip is still failed: $state"
done
"$bin" slices repair v4:1,2,3 --home "$H" >>"$dir/cli.log" 2>&1 || fail "slices repair"
# the repair queues the same alert with endsAt; Alertmanager's API then lists it no more
wait_outbox "any(x['event']=='chip_failed' and x.get('resolves') and x['hook']=='am-chips' and x['state']=='delivered' for x in a)" ||
  fail "the repair did not deliver a resolving chip_failed alert: $(alerts_json)"
wait_am_gone am2_chip "Alertmanager still shows chip_failed after the repair"
"$bin" hooks rm am-chips --home "$H" >/dev/null
echo "it_alerts: chip_failed stays active in Alertmanager until the chip is repaired"

# ---- a receiver that never answers: dead letter, then redeliver
"$bin" hooks add void --home "$H" --url "$R/std/hang/void" --format standard --secret-env WH_SECRET \
  --on run_failed >/dev/null
"$bin" hooks test void --home "$H" >/dev/null 2>&1 && fail "a test to a receiver that never answers succeeded"
"$bin" run "$dir/flaky.yaml" --home "$H" --plain >"$dir/run5.log" 2>&1
run5=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
dead() { "$bin" alerts list --dead --home "$H" --json | python3 -c "import json,sys; print(sum(1 for x in json.load(sys.stdin) if x.get('run')=='$run5' and x['hook']=='void'))"; }
for _ in $(seq 1 300); do [[ $(dead) == 1 ]] && break; sleep 0.2; done
[[ $(dead) == 1 ]] || fail "the alert to a receiver that never answers is not dead-lettered: $(alerts_json)"
grep -q "void" <<<"$("$bin" alerts list --dead --home "$H")" || fail "alerts list --dead does not show it"
[[ $(recv "sum(1 for r in rows if r['path']=='/std/hang/void' and '$run5' in r['body'])") == 6 ]] ||
  fail "expected max_attempts=6 attempts to the silent receiver"
"$bin" hooks add void --home "$H" --url "$R/std/ok" --format standard --secret-env WH_SECRET --on run_failed >/dev/null
"$bin" alerts redeliver --dead --home "$H" >/dev/null || fail "alerts redeliver --dead"
wait_outbox "all(x['state']=='delivered' for x in a if x.get('run')=='$run5')" || fail "redelivered alerts did not arrive"
echo "it_alerts: a receiver that never answers: dead-lettered, then redelivered"

# ---- the daemon killed with -9: the next one to start says so
"$bin" hooks add ops --home "$H" --url "$R/std/ops" --format standard --secret-env WH_SECRET \
  --on daemon_unclean_stop >/dev/null
kill -KILL "$dpid"; wait "$dpid" 2>/dev/null
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >>"$dir/d.log" 2>&1 &
dpid=$!; pids+=($dpid)
wait_outbox "any(x['event']=='daemon_unclean_stop' and x['state']=='delivered' for x in a)" ||
  fail "no daemon_unclean_stop alert after a daemon was killed: $(alerts_json)"
[[ $(recv "sum(1 for r in rows if r['path']=='/std/ops' and r['verified'] and 'daemon_unclean_stop' in r['body'])") == 1 ]] ||
  fail "the receiver did not get daemon_unclean_stop"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon did not stop cleanly"
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >>"$dir/d.log" 2>&1 &
dpid=$!; pids+=($dpid)
sleep 2
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon did not stop cleanly"
[[ $(alerts_json | python3 -c "import json,sys; print(sum(1 for x in json.load(sys.stdin) if x['event']=='daemon_unclean_stop'))") == 1 ]] ||
  fail "a daemon started after a clean stop raised daemon_unclean_stop"
echo "it_alerts: a daemon started after an unclean stop says so, after a clean one it does not"
echo "it_alerts: ok"
