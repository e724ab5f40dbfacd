#!/usr/bin/env bash
# Integration: the API of a daemon that is drained (SIGTERM) and stopped (docs/api.md, "While
# the daemon drains"; docs/daemon.md, Signals):
#  - while it drains, POST /api/v1/runs, :retry, :resume and schedules:fire are 503 problems
#    with Retry-After, and create nothing; /readyz is 503; reads are served;
#  - `tpuflow --remote run` with TPUFLOW_RETRIES=0 says the daemon is draining and exits 69;
#  - with retries it waits as Retry-After says (saying so), and its run reaches the daemon
#    started next on the same address, once;
#  - the event streams and a followed log open at the stop end cleanly (curl exits 0: the
#    chunked body's last chunk came), the event stream with its last comment; `--remote runs
#    logs --follow` says the log ended before its step did and exits 69.
# Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_daemon_stop daemon-stop
export TPUFLOW_LOG=info
pids=()
cleanup() {
  for p in "${pids[@]}" $dpid; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"

rel=$dir/release
# holds the drain open until $rel exists: on SIGTERM the step waits for it, then exits
cat >hold.yaml <<YAML
name: hold
steps:
  - name: a
    type: shell
    with: {argv: [sh, -c, 'trap "while [ ! -e $rel ]; do sleep 0.1; done; exit 143" TERM; echo up >$dir/up; while [ ! -e $rel ]; do sleep 0.1; done']}
YAML
cat >quick.yaml <<'YAML'
name: quick
steps:
  - {name: a, type: shell, with: {argv: [sh, -c, 'echo quick']}}
YAML
mkdir -p "$H"
echo "max_runs=1" >"$H/daemon.conf" # the second run stays pending behind the first
start_daemon --grace 60s
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json")
held=$("$bin" run hold.yaml --home "$H" --detach) || fail "run hold.yaml"
waiting=$("$bin" run quick.yaml --home "$H" --detach) || fail "run quick.yaml"
for _ in $(seq 1 600); do [[ -e $dir/up ]] && break; sleep 0.05; done
[[ -e $dir/up ]] || fail "the held step never started"

# streams that would not end on their own: every run's events, the pending run's events and
# its step's followed log
curl -sSN "$url/api/v1/events?after=latest" >ev.out 2>ev.err &
ev=$!; pids+=($ev)
curl -sSN "$url/api/v1/runs/$waiting/events" >run_ev.out 2>run_ev.err &
rev=$!; pids+=($rev)
curl -sSN "$url/api/v1/runs/$waiting/steps/a/logs?follow=true" >logs.out 2>logs.err &
lg=$!; pids+=($lg)
"$bin" --remote "$url" runs logs "$waiting" a --follow >cli_logs.out 2>cli_logs.err &
clg=$!; pids+=($clg)
for f in ev.out run_ev.out; do
  for _ in $(seq 1 200); do [[ -s $f ]] && break; sleep 0.05; done
  [[ -s $f ]] || fail "the stream into $f did not open"
done

kill -TERM "$dpid"
for _ in $(seq 1 200); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 503 ]] && break
  sleep 0.05
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 503 ]] || fail "/readyz did not say 503 while draining"

# ---- what would start a run is refused, a problem with Retry-After; nothing is created
count() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1], timeout=30).execute("SELECT count(*) FROM runs").fetchone()[0])' "$H/tpuflow.db"; }
before=$(count)
body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' quick.yaml)
refused() { # METHOD PATH [BODY]
  local code
  code=$(curl -s -o refused.json -D refused.head -w '%{http_code}' -X "$1" \
    -H 'Content-Type: application/json' ${3:+-d "$3"} "$url$2")
  [[ $code == 503 ]] || fail "$1 $2 while draining: $code $(cat refused.json)"
  grep -qi '^retry-after: 5' refused.head || fail "$1 $2: no Retry-After: $(cat refused.head)"
  grep -qi '^content-type: application/problem+json' refused.head || fail "$1 $2: not a problem"
  grep -q 'draining' refused.json || fail "$1 $2: the problem does not say why: $(cat refused.json)"
}
refused POST /api/v1/runs "$body"
refused POST "/api/v1/runs/$held:retry"
refused POST "/api/v1/runs/$held:resume"
refused POST /api/v1/schedules:fire
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/api/v1/runs/$held") == 200 ]] || fail "reads are not served while draining"
expect 69 "the daemon is draining" -- env TPUFLOW_RETRIES=0 "$bin" --remote "$url" run quick.yaml
[[ $(count) == "$before" ]] || fail "a run was created while draining"

# ---- a client that retries: its run reaches the next daemon on the same address, once
port=${url##*:}
TPUFLOW_RETRIES=8 "$bin" --remote "$url" run quick.yaml >client.out 2>client.err &
client=$!; pids+=($client)
for _ in $(seq 1 400); do grep -q "retrying in 5 s" client.err && break; sleep 0.05; done
grep -q "503 Service Unavailable: the daemon is draining.*; retrying in 5 s (1 of 8)" client.err ||
  fail "the client did not say it waits as Retry-After says: $(cat client.err)"

touch "$rel"
wait "$dpid"; rc=$?; dpid=
[[ $rc == 0 ]] || fail "the drained daemon exited $rc"
for p in $ev $rev $lg; do
  wait "$p"; rc=$?
  [[ $rc == 0 ]] || fail "a stream did not end cleanly at the stop (curl exit $rc): $(cat ev.err run_ev.err logs.err)"
done
wait "$clg"; rc=$?
[[ $rc == 69 ]] && grep -q "ended before the step did" cli_logs.err ||
  fail "--remote runs logs --follow did not say its log ended early (exit $rc): $(cat cli_logs.err)"
for f in ev.out run_ev.out; do
  python3 - "$f" <<'PY' || fail "$f did not end between two events with the stop comment"
import sys
b = open(sys.argv[1], "rb").read()
c = b": the server is stopping; reconnect with Last-Event-ID\n\n"
assert b.endswith(c) and b[: -len(c)].endswith(b"\n\n"), b[-200:]
PY
done

"$bin" daemon --home "$H" --listen "127.0.0.1:$port" --auth none --grace 60s >>"$dir/d.log" 2>&1 &
dpid=$!
wait "$client"; rc=$?
[[ $rc == 0 ]] || fail "the retrying client exited $rc: $(cat client.out client.err)"
grep -q "succeeded" client.out || fail "the retrying client's run did not succeed: $(cat client.out)"
[[ $(count) == $((before + 1)) ]] || fail "the retrying client made $(($(count) - before)) runs, not 1"
# the run followed before is over now: its log ends with its step, exit 0
expect 0 "quick" -- "$bin" --remote "$url" runs logs "$waiting" a --follow
kill -TERM "$dpid"; wait "$dpid" || fail "the second daemon's exit"; dpid=
echo "it_daemon_stop: ok"
