#!/usr/bin/env bash
# Stops the processes named by pid files, and nothing else: usage
#   scripts/stop-pidfiles.sh SECONDS FILE...
# Each FILE that exists is read, its process sent SIGTERM and the file removed; whatever is
# still alive after SECONDS gets SIGKILL. Used by the stop scripts of the servers tests start.
set -uo pipefail
wait_s=${1:?usage: $0 SECONDS FILE...}
shift
pids=()
for f in "$@"; do
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null && pids+=("$pid")
  rm -f "$f"
done
for _ in $(seq 1 $((wait_s * 10))); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || exit 0
  sleep 0.1
done
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
exit 0
