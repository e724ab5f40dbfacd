#!/usr/bin/env bash
# bench/daemon.sh — `tpuflow daemon` (docs/daemon.md, docs/benchmarks.md):
#  - its resident memory when idle, serving an empty home (goal: at most 20 MB);
#  - submit-to-first-step latency: from the commit of a submitted run (runs.created_at) to
#    the start of its first step's attempt (attempts.started_at), for N runs of a one-step
#    pipeline submitted one after the other through the daemon, beside the same figure for
#    embedded `tpuflow run` processes in the same run (goal through the daemon: p99 <= 10 ms).
# Both timestamps come from the database, so the client's own start-up is not counted.
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
E=$dir/embedded
for _ in $(seq 1 "$N"); do "$bin" run "$dir/one.yaml" --home "$E" --embedded --plain >/dev/null 2>&1; done
read -r e50 e99 en < <(latency "$E" cli)
echo "submit -> first step running, $dn runs through the daemon: p50 $d50 ms, p99 $d99 ms (goal p99 <= 10 ms)"
echo "create -> first step running, $en embedded tpuflow run:    p50 $e50 ms, p99 $e99 ms"
rss2=$(awk '/^VmRSS/ {print $2}' "/proc/$dpid/status")
echo "daemon RSS after $dn runs: $((rss2 / 1024)).$(( (rss2 % 1024) * 10 / 1024 )) MB"
