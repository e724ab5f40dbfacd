#!/usr/bin/env bash
# Alert delivery latency through the daemon: from the commit of an alert (alerts.created_at)
# to its first POST at a receiver on 127.0.0.1, for N chip_failed alerts raised one after the
# other (`tpuflow slices fail`), each to a hook of its own home:
#  - alertmanager: every alert stays firing and is posted again each second (refire=1s), so
#    the new ones share their hook with a growing round of re-posts (docs/alerts.md);
#  - slack (the peer, in the same run): the same alerts, posted once.
# Goal: p99 <= 1 s after the commit, with re-posts as without.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-$PWD/build/tpuflow}
N=${TF_BENCH_ALERTS:-40}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpuflow-bench-alerts.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# the receiver: answers 200 and writes "TIME WEBHOOK-ID" per request
cat >"$dir/recv.py" <<'PY'
import http.server, sys, time
out = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        out.write(f"{time.time():.4f} {self.headers.get('webhook-id')}\n")
        out.flush()
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
class S(http.server.ThreadingHTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
# stop: ends the receiver and the daemon of the current run (pids)
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  pids=()
}
# run FORMAT: prints "p50 p99 alerts posts" for N alerts through a daemon to a FORMAT hook.
# It runs in a subshell (read < <(run ...)), so it stops what it started itself.
run() {
  local d=$dir/$1 port
  pids=()
  trap stop EXIT
  mkdir -p "$d/home"
  printf 'timeout=2s\nrefire=1s\n' >"$d/home/alerts.conf"
  python3 "$dir/recv.py" "$d/arrivals" >"$d/port" &
  pids+=($!)
  for _ in $(seq 1 100); do [[ -s $d/port ]] && break; sleep 0.1; done
  port=$(head -1 "$d/port")
  "$BIN" hooks add h --home "$d/home" --url "http://127.0.0.1:$port/api/v2/alerts" \
    --format "$1" --on chip_failed >/dev/null
  "$BIN" daemon --home "$d/home" --listen 127.0.0.1:0 >"$d/daemon.log" 2>&1 &
  pids+=($!)
  sleep 2
  for i in $(seq 0 $((N - 1))); do
    "$BIN" slices fail "v4:$((i % 4)),$((i / 4 % 4)),$((i / 16))" --reason bench --home "$d/home" >/dev/null
    sleep 0.2
  done
  sleep 4
  "$BIN" alerts list --home "$d/home" --json --limit 10000 >"$d/outbox.json"
  stop
  python3 - "$d/arrivals" "$d/outbox.json" <<'PY'
import json, sys
first = {}
for line in open(sys.argv[1]):
    t, m = line.split()
    first.setdefault(m, float(t))
lat = sorted(first[a["msg_id"]] - a["created_at"] for a in json.load(open(sys.argv[2]))
             if a["msg_id"] in first)
n = len(lat)
print("%.3f %.3f %d %d" % (lat[n // 2], lat[min(n - 1, int(n * 0.99))], n,
                           sum(1 for _ in open(sys.argv[1]))))
PY
}
read -r a50 a99 an aposts < <(run alertmanager)
read -r s50 s99 sn sposts < <(run slack)
echo "commit -> first POST, $N alerts through the daemon (load average $(cut -d' ' -f1 /proc/loadavg)):"
echo "  alertmanager hook, firing alerts re-posted each second: p50 $a50 s, p99 $a99 s ($an alerts, $aposts posts) (goal p99 <= 1 s)"
echo "  slack hook, no re-posts (peer):                         p50 $s50 s, p99 $s99 s ($sn alerts, $sposts posts)"
