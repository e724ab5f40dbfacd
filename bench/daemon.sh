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
# Everything, the homes and the floor's file included, lives under $TMPDIR (else /tmp):
# TMPDIR=/dev/shm shows the daemon's own part without the disk's fdatasync.
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpuflow-bench-daemon.XXXXXX")
dpid=
cleanup() {
  touch "$dir/fsync.stop"
  [[ -n $dpid ]] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  wait 2>/dev/null; rm -rf "$dir"
}
trap cleanup EXIT
# The step appends its run id and the wall time its process started (bash's EPOCHREALTIME, no
# fork) to a file: "process started" counts the start's commit and sync and the exec too.
cat >"$dir/one.yaml" <<YAML
name: one
steps:
  - {name: s, type: shell, with: {argv: [bash, -c, 'echo \$TPUFLOW_RUN \$EPOCHREALTIME >> $dir/starts']}}
YAML
latency() { # HOME TRIGGER -> "p50 p99 n p50' p99'": created -> first attempt started (database),
            # and created -> the step's process running (its line in $dir/starts), in ms
  python3 - "$1/tpuflow.db" "$2" "$dir/starts" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("""SELECT r.id, r.created_at, a.started_at FROM runs r
                     JOIN attempts a ON a.run_id = r.id AND a.n = 1
                     WHERE r.trigger = ?""", (sys.argv[2],)).fetchall()
ran = dict(l.split() for l in open(sys.argv[3]) if len(l.split()) == 2)
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
v = [(s - c) * 1000 for _, c, s in rows]
w = [(float(ran[i]) - c) * 1000 for i, c, _ in rows if i in ran]
print(f"{q(v, .5):.2f} {q(v, .99):.2f} {len(v)} {q(w, .5):.2f} {q(w, .99):.2f}")
PY
}
# The floor: one fdatasync of a 4 KiB overwrite in the same file system every 20 ms for the
# whole measurement (the least a durable submission waits for), under the same load.
python3 - "$dir/fsync.dat" "$dir/fsync.ms" "$dir/fsync.stop" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
out, i = open(sys.argv[2], "w"), 0
while not os.path.exists(sys.argv[3]):
    t = time.monotonic(); os.pwrite(fd, b"x" * 4096, (i % 64) * 4096); os.fdatasync(fd)
    out.write(f"{(time.monotonic() - t) * 1000:.3f}\n"); i += 1; time.sleep(0.02)
out.close()
PY
spid=$!
H=$dir/daemon
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >"$dir/d.log" 2>&1 &
dpid=$!
for _ in $(seq 1 200); do [[ -s $H/daemon.json ]] && break; sleep 0.05; done
sleep 2
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$dpid/status")
echo "daemon idle RSS: $((rss / 1024)).$(( (rss % 1024) * 10 / 1024 )) MB (goal <= 20 MB)"
for _ in $(seq 1 "$N"); do "$bin" run "$dir/one.yaml" --home "$H" --wait >/dev/null 2>&1; done
read -r d50 d99 dn dp50 dp99 < <(latency "$H" cli)
# the same through the HTTP API: POST /api/v1/runs (the run is committed by the daemon itself)
tok=$("$bin" tokens create --home "$H" --name bench --scope trigger 2>/dev/null | grep -o 'tpf_[A-Za-z0-9_]*' | head -1)
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json")
body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read()}))' "$dir/one.yaml")
for i in $(seq 1 "$N"); do
  curl -sf -o /dev/null -H "Authorization: Bearer $tok" -H "Content-Type: application/json" \
    -d "$body" "$url/api/v1/runs" || echo "POST /api/v1/runs failed" >&2
  "$bin" runs watch latest --home "$H" --plain >/dev/null 2>&1 # one at a time, as above
done
read -r a50 a99 an ap50 ap99 < <(latency "$H" api)
E=$dir/embedded
for _ in $(seq 1 "$N"); do "$bin" run "$dir/one.yaml" --home "$E" --embedded --plain >/dev/null 2>&1; done
read -r e50 e99 en ep50 ep99 < <(latency "$E" cli)
touch "$dir/fsync.stop"; wait "$spid"
read -r f50 f99 fn < <(python3 -c '
import sys; v = sorted(float(x) for x in open(sys.argv[1]))
print(f"{v[len(v)//2]:.2f} {v[min(len(v)-1, int(.99*len(v)))]:.2f} {len(v)}")' "$dir/fsync.ms")
ratio() { python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}x")' "$1" "$2"; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "floor: one 4 KiB fdatasync, $fn samples during the runs: p50 $f50 ms, p99 $f99 ms"
echo "submit -> first step running (database), $dn runs through the daemon: p50 $d50 ms, p99 $d99 ms (goal p99 <= 10 ms); floor ratios $(ratio "$d50" "$f50") / $(ratio "$d99" "$f99")"
echo "  the same, $an runs by POST /api/v1/runs:           p50 $a50 ms, p99 $a99 ms; floor ratios $(ratio "$a50" "$f50") / $(ratio "$a99" "$f99")"
echo "create -> first step running, $en embedded tpuflow run:    p50 $e50 ms, p99 $e99 ms"
echo "submit -> the step's process running: daemon (tpuflow run) p50 $dp50 / p99 $dp99 ms, POST p50 $ap50 / p99 $ap99 ms, embedded p50 $ep50 / p99 $ep99 ms"
rss2=$(awk '/^VmRSS/ {print $2}' "/proc/$dpid/status")
echo "daemon RSS after $dn runs: $((rss2 / 1024)).$(( (rss2 % 1024) * 10 / 1024 )) MB"
