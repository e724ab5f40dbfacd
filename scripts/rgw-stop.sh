#!/usr/bin/env bash
# Stops what scripts/rgw-start.sh DIR started, by the pid files it wrote (nothing else), and
# frees the OSD's store (its memory, or bluestore's sparse file).
set -uo pipefail
B=${1:?usage: $0 DIR}
pids=()
for s in rgw osd mgr mon; do
  f=$B/run/$s.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null && pids+=("$pid")
  rm -f "$f"
done
for _ in $(seq 1 100); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.1
done
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
rm -f "$B/osd/block"
exit 0
