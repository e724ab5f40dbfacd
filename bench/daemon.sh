#!/usr/bin/env bash
# bench/daemon.sh — `tpuflow daemon` (docs/daemon.md, docs/benchmarks.md):
#  - its resident memory when idle, serving an empty home (goal: at most 20 MB);
#  - submit-to-first-step latency: from the commit of a submitted run (runs.created_at) to
#    the start of its first step's attempt (attempts.started_at), for N runs of a one-step
#    pipeline submitted one after the other through the daemon (by `tpuflow run --wait`, and
#    by POST /api/v1/runs), beside the same figure for embedded `tpuflow run` processes in the
#    same run (goal through the daemon: p99 <= 10 ms).
# Both timestamps come from the database, so the client's own start-up is not counted; each is
# taken inside the transaction that commits it (created_at before the submission's fsync,
# started_at before the fsync of the commit that starts the step). The load average is
# printed: on a shared machine the scheduling delays it brings dominate the tail.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${TPUFLOW_BIN:-$PWD/build/tpuflow}
N=${TF_BENCH_DAEMON_RUNS:-60}
dir=$(mktemp -d /tmp/tpuflow-bench-daemon.XXXXXX)
dpid=
cleanup() { [[ -n $dpid ]] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
cat >"$dir/one.yaml" <<'YAML'
name: one
steps:
  - {name: s, type: shell, with: {argv: ['true']}}
YAML
latency() { # HOME TRIGGER -> "p50 p99" in ms
  python3 - "$1/tpuflow.db" "$2" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("""SELECT (a.started_at - r.created_at) * 1000 FROM runs r
                     JOIN attempts a ON a.run_id = r.id AND a.n = 1
                     WHERE r.trigger = ? ORDER BY 1""", (sys.argv[2],)).fetchall()
v = [x[0] for x in rows]
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
print(f"{q(0.5):.2f} {q(0.99):.2f} {len(v)}")
PY
}
H=$dir/daemon
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >"$dir/d.log" 2>&1 &
dpid=$!
for _ in $(seq 1 200); do [[ -s $H/daemon.json ]] && break; sleep 0.05; done
sleep 2
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$dpid/status")
echo "daemon idle RSS: $((rss / 1024)).$(( (rss % 1024) * 10 / 1024 )) MB (goal <= 20 MB)"
for _ in $(seq 1 "$N"); do "$bin" run "$dir/one.yaml" --home "$H" --wait >/dev/null 2>&1; done
read -r d50 d99 dn < <(latency "$H" cli)
# the same through the HTTP API: POST /api/v1/runs (the run is committed by the daemon itself)
tok=$("$bin" tokens create --home "$H" --name bench --scope trigger 2>/dev/null | grep -o 'tpf_[A-Za-z0-9_]*' | head -1)
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json")
body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$dir/one.yaml")
for i in $(seq 1 "$N"); do
  curl -sf -o /dev/null -H "Authorization: Bearer $tok" -H "Content-Type: application/json" \
    -d "$body" "$url/api/v1/runs" || echo "POST /api/v1/runs failed" >&2
  "$bin" runs watch latest --home "$H" --plain >/dev/null 2>&1 # one at a time, as above
done
read -r a50 a99 an < <(latency "$H" api)
E=$dir/embedded
for _ in $(seq 1 "$N"); do "$bin" run "$dir/one.yaml" --home "$E" --embedded --plain >/dev/null 2>&1; done
read -r e50 e99 en < <(latency "$E" cli)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "submit -> first step running, $dn runs through the daemon: p50 $d50 ms, p99 $d99 ms (goal p99 <= 10 ms)"
echo "  the same, $an runs by POST /api/v1/runs:           p50 $a50 ms, p99 $a99 ms"
echo "create -> first step running, $en embedded tpuflow run:    p50 $e50 ms, p99 $e99 ms"
rss2=$(awk '/^VmRSS/ {print $2}' "/proc/$dpid/status")
echo "daemon RSS after $dn runs: $((rss2 / 1024)).$(( (rss2 % 1024) * 10 / 1024 )) MB"
