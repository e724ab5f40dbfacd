#!/usr/bin/env bash
# Stops what scripts/slurm-start.sh DIR started, by the pid files it wrote (nothing else):
# slurmd, slurmctld, then munged. Jobs still running on the node are ended with slurmd.
set -uo pipefail
D=${1:?usage: $0 DIR}
pids=()
for s in slurmd slurmctld munged; do
  f=$D/run/$s.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 1 100); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.1
done
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
rm -f "$D"/run/*.pid
exit 0
