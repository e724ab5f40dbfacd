#!/usr/bin/env bash
# Stops what scripts/s3-server-start.sh DIR started, by the pid files it wrote (nothing else).
set -uo pipefail
B=${1:?usage: $0 DIR}
pids=()
for s in proxy object container account memcached; do
  f=$B/run/$s.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null && pids+=("$pid")
  rm -f "$f"
done
for _ in $(seq 1 50); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || exit 0
  sleep 0.1
done
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
exit 0
