#!/usr/bin/env bash
# Integration: `tpuflow daemon` on a temporary home and a free loopback port (docs/daemon.md).
#  - systemd's notify protocol: READY=1 once it serves, STOPPING=1 on drain ($NOTIFY_SOCKET)
#  - a second daemon on the same home is refused with exit 75
#  - a pipeline posted with errors is named by its `name:` in the 422's diagnostics
#  - one worker pool for every run: 3 runs x 4 parallel steps on pool=2, never 3 at once
#  - `tpuflow run` through the daemon follows the run to its end (exit 0)
#  - `run --detach` prints the run id at once; `runs watch` follows it to the end
#  - `runs cancel` of a run the daemon drives: it ends failed within seconds
#  - POST :cancel runs the finally steps (they see ${run.state} == cancelled); a second
#    cancel stops them
#  - a cancelled step's process gets --grace to stop before SIGKILL
#  - a run left `running` by a killed `tpuflow run --embedded` is adopted and finished
#  - SIGTERM drains (exit 0, run interrupted and marked); the next daemon finishes the run
# Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_daemon daemon
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
export TPUFLOW_LOG=info

# a notify socket in the manner of systemd: records what it is told
python3 - "$dir/notify.sock" "$dir/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a", buffering=1) as f:
    while True:
        f.write(s.recv(4096).decode() + "\n")
PY
pids+=($!)
for _ in $(seq 1 100); do [[ -S $dir/notify.sock ]] && break; sleep 0.05; done

start_daemon() {
  NOTIFY_SOCKET=$dir/notify.sock "$bin" daemon --home "$H" --listen 127.0.0.1:0 --grace 20s \
    >>"$dir/d.log" 2>&1 &
  dpid=$!; pids+=($dpid)
  for _ in $(seq 1 200); do
    [[ -s $H/daemon.json ]] && grep -q "READY=1" "$dir/notify.log" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "the daemon did not become ready"
}
mkdir -p "$H"
echo "pool=2" >"$H/daemon.conf" # two steps at once across all runs (the shared worker pool)
start_daemon
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json")
curl -sf "$url/healthz" >/dev/null || fail "GET /healthz"
curl -sf "$url/readyz" | grep -q ready || fail "GET /readyz"

# ---- a pipeline posted with errors: its diagnostics name it by its own `name:`
tok=$("$bin" tokens create --home "$H" --name it --scope trigger | grep -o 'tpf_[A-Za-z0-9_]*' | head -1)
body=$(python3 -c 'import json; print(json.dumps({"yaml": "name: broken-one\nsteps:\n  - {name: a, type: shel}\n"}))')
curl -s -H "Authorization: Bearer $tok" -H "Content-Type: application/json" -d "$body" \
  "$url/api/v1/runs" >"$dir/bad.json"
python3 - "$dir/bad.json" <<'PY' || fail "a bad posted pipeline: $(cat "$dir/bad.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["status"] == 422, p
assert p["errors"] and all(e["file"] == "broken-one" and e["line"] == 3 for e in p["errors"]), p
PY

# ---- a second daemon is refused
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >"$dir/second.log" 2>&1
rc=$?
[[ $rc == 75 ]] || fail "a second daemon exited $rc, expected 75"
grep -q "already serves" "$dir/second.log" || fail "the second daemon did not say why: $(cat "$dir/second.log")"

cat >"$dir/quick.yaml" <<'YAML'
name: quick
steps:
  - {name: a, type: shell, with: {argv: [sh, -c, 'sleep 0.3; echo a']}}
  - {name: b, type: shell, needs: [a], with: {argv: [sh, -c, 'echo b']}}
YAML
cat >"$dir/slow.yaml" <<YAML
name: slow
steps:
  - {name: first, type: shell, with: {argv: [sh, -c, 'echo "\$TPUFLOW_ATTEMPT" >> $dir/slow.marks; sleep 4']}}
  - {name: second, type: shell, needs: [first], with: {argv: [sh, -c, 'echo done']}}
YAML

# ---- `tpuflow run` through the daemon
"$bin" run "$dir/quick.yaml" --home "$H" --plain >"$dir/run.log" 2>&1 || fail "run through the daemon: $(cat "$dir/run.log")"
grep -q "submitted to the daemon" "$dir/run.log" || fail "run did not go through the daemon: $(cat "$dir/run.log")"
grep -q "succeeded" "$dir/run.log" || fail "run did not follow to the end"
"$bin" runs show latest --home "$H" --json | grep -q '"trigger": "cli"' || fail "trigger not recorded"

# ---- one worker pool for every run: three runs of four parallel steps, pool=2 -> never more
# than two step processes at once (each step records when its process ran)
cat >"$dir/wide.yaml" <<YAML
name: wide
steps:
YAML
for s in a b c d; do
  echo "  - {name: $s, type: shell, with: {argv: [bash, -c, 'echo \$EPOCHREALTIME +1 >> $dir/spans; sleep 0.3; echo \$EPOCHREALTIME -1 >> $dir/spans']}}" >>"$dir/wide.yaml"
done
wide=()
for _ in 1 2 3; do wide+=("$("$bin" run "$dir/wide.yaml" --home "$H" --detach)") || fail "run wide"; done
for r in "${wide[@]}"; do
  "$bin" runs watch "$r" --home "$H" --plain >/dev/null 2>&1 || fail "wide run $r did not succeed"
done
python3 - "$dir/spans" <<'PY' || fail "more step processes at once than the pool has"
import sys
ev = sorted((float(t), int(d)) for t, d in (l.split() for l in open(sys.argv[1])))
assert len(ev) == 24, len(ev)
now = top = 0
for _, d in ev:
    now += d; top = max(top, now)
assert 1 <= top <= 2, top
print("it_daemon: 3 runs x 4 steps on a pool of 2: at most %d step processes at once" % top)
PY

# ---- --detach, then runs watch
run=$("$bin" run "$dir/quick.yaml" --home "$H" --detach) || fail "run --detach"
[[ $run =~ ^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$ ]] || fail "--detach printed '$run', not a run id"
"$bin" runs watch "$run" --home "$H" --plain >"$dir/watch.log" 2>&1 || fail "runs watch: $(cat "$dir/watch.log")"
grep -q "run $run succeeded" "$dir/watch.log" || fail "runs watch did not end with the run's result"

# ---- runs cancel
run=$("$bin" run "$dir/slow.yaml" --home "$H" --detach)
for _ in $(seq 1 100); do [[ -s $dir/slow.marks ]] && break; sleep 0.05; done
"$bin" runs cancel "$run" --home "$H" >/dev/null || fail "runs cancel"
"$bin" run "$dir/quick.yaml" --home "$H" --wait >/dev/null 2>&1 # the daemon goes on taking runs
"$bin" runs watch "$run" --home "$H" --plain >"$dir/cancel.log" 2>&1
[[ $? == 1 ]] || fail "the cancelled run did not end failed: $(tail -3 "$dir/cancel.log")"
grep -q "cancelled" "$dir/cancel.log" || fail "the cancelled run does not say so"
rm -f "$dir/slow.marks"

# ---- cancel through the API runs the finally steps (${run.state} == cancelled); a second
# cancel (here `runs cancel`) stops them; the run stays failed, "cancelled"
cat >"$dir/fin.yaml" <<YAML
name: fin
steps:
  - {name: s, type: shell, with: {argv: [sh, -c, 'echo up >> $dir/fin.marks; sleep 600']}}
finally:
  - {name: report, type: shell, with: {argv: [sh, -c, 'echo "state=\$0"', '\${run.state}']}}
  - {name: linger, type: shell, needs: [report], with: {argv: [sh, -c, 'echo fin >> $dir/fin.marks; sleep 600']}}
YAML
run=$("$bin" run "$dir/fin.yaml" --home "$H" --detach)
for _ in $(seq 1 200); do grep -q up "$dir/fin.marks" 2>/dev/null && break; sleep 0.05; done
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $tok" "$url/api/v1/runs/$run:cancel")
[[ $code == 202 ]] || fail "POST :cancel answered $code"
for _ in $(seq 1 400); do grep -q fin "$dir/fin.marks" 2>/dev/null && break; sleep 0.05; done
grep -q fin "$dir/fin.marks" || fail "the finally steps did not run after the cancel"
expect 0 "its finally steps stop too" -- "$bin" runs cancel "$run" --home "$H"
"$bin" runs watch "$run" --home "$H" --plain >/dev/null 2>&1
[[ $? == 1 ]] || fail "the cancelled run with finally steps did not end failed"
expect 0 "state=cancelled" -- "$bin" runs logs "$run" report --home "$H"
"$bin" runs show "$run" --home "$H" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
st = {s["name"]: s["state"] for s in d["steps"]}
assert st == {"s": "pending", "report": "succeeded", "linger": "pending"}, st
assert d["error"].startswith("cancelled") and "second cancel" in d["error"], d["error"]
assert d["cancelled_at"] is not None, d' || fail "the cancelled run's steps"
at=$("$bin" runs show "$run" --home "$H" --json | python3 -c '
import json, sys, time
print(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(json.load(sys.stdin)["cancelled_at"]))))')
expect 0 "  cancelled at $at" -- "$bin" runs show "$run" --home "$H"

# ---- a stopped step's process gets the daemon's --grace (20 s here) between SIGTERM and
# SIGKILL, not the executor's default 10 s: its TERM handler takes 11 s and still finishes
cat >"$dir/trap.yaml" <<YAML
name: trap
steps:
  - {name: t, type: shell, with: {argv: [sh, -c, 'trap "sleep 11; echo clean >> $dir/trap.marks; exit 1" TERM; echo up >> $dir/trap.marks; sleep 600 & wait']}}
YAML
run=$("$bin" run "$dir/trap.yaml" --home "$H" --detach)
for _ in $(seq 1 100); do [[ -s $dir/trap.marks ]] && break; sleep 0.05; done
"$bin" runs cancel "$run" --home "$H" >/dev/null || fail "runs cancel of the trapping run"
"$bin" runs watch "$run" --home "$H" --plain >/dev/null 2>&1
grep -q clean "$dir/trap.marks" || fail "the step's process was killed before the daemon's --grace ran out"

# ---- a run whose owner was killed is adopted
"$bin" run "$dir/slow.yaml" --home "$H" --embedded --plain >"$dir/emb.log" 2>&1 &
epid=$!; pids+=($epid)
for _ in $(seq 1 100); do [[ -s $dir/slow.marks ]] && break; sleep 0.05; done
run=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
kill -KILL "$epid"; wait "$epid" 2>/dev/null
"$bin" runs watch "$run" --home "$H" --plain >"$dir/adopt.log" 2>&1 || fail "the orphaned run was not finished by the daemon: $(tail -5 "$dir/adopt.log")"
grep -q "adopting it" "$dir/d.log" || fail "the daemon did not say it adopted the run"
[[ $(wc -l <"$dir/slow.marks") == 2 ]] || fail "expected one new attempt after adoption: $(cat "$dir/slow.marks")"
rm -f "$dir/slow.marks"

# ---- SIGTERM drains; the next daemon finishes the run
run=$("$bin" run "$dir/slow.yaml" --home "$H" --detach)
for _ in $(seq 1 100); do [[ -s $dir/slow.marks ]] && break; sleep 0.05; done
kill -TERM "$dpid"; wait "$dpid"; rc=$?
[[ $rc == 0 ]] || fail "the drained daemon exited $rc"
grep -q "STOPPING=1" "$dir/notify.log" || fail "no STOPPING=1 on drain"
[[ ! -e $H/daemon.json ]] || fail "daemon.json left behind after a clean exit"
"$bin" runs show "$run" --home "$H" --json >"$dir/drained.json"
grep -q '"state": "interrupted"' "$dir/drained.json" || fail "the drained run is not interrupted: $(head -5 "$dir/drained.json")"
start_daemon
"$bin" runs watch "$run" --home "$H" --plain >"$dir/after.log" 2>&1 || fail "the next daemon did not finish the drained run: $(tail -5 "$dir/after.log")"
kill -TERM "$dpid"; wait "$dpid" || fail "second daemon exit"
echo "it_daemon: ok"
