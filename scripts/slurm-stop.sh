#!/usr/bin/env bash
# Stops what scripts/slurm-start.sh DIR started, and nothing else: the cluster's jobs
# (scancel, so each job's step daemon ends it as Slurm does), then slurmd, slurmctld and
# munged by the pid files it wrote. Stopping slurmd leaves its step daemons (slurmstepd, one
# per running job step, parented to init) and their jobs running, so any still alive after
# that are ended by PID: the slurmstepd processes and job processes whose environment names
# this cluster's configuration (SLURM_CONF=DIR/slurm.conf, which Slurm sets in every job and
# slurmd passes to its step daemons).
set -uo pipefail
D=${1:?usage: $0 DIR}
D=$(cd "$D" 2>/dev/null && pwd) || exit 0
conf=$D/slurm.conf

# The pids of this cluster's step daemons and job processes.
cluster_pids() {
  local p env exe
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" ]] && continue
    env=$(tr '\0' '\n' 2>/dev/null < "/proc/$p/environ") || continue
    grep -qxF "SLURM_CONF=$conf" <<< "$env" || continue
    exe=$(readlink "/proc/$p/exe" 2>/dev/null)
    if [[ ${exe##*/} == slurmstepd* ]] || grep -q '^SLURM_JOB_ID=' <<< "$env"; then
      echo "$p"
    fi
  done
}

# Whether process $1 lives (a zombie waiting for its parent does not).
alive() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) } # the state follows the command name, which may hold spaces
  [[ ${st%% *} != Z ]]
}

# wait_gone SECONDS PID...: until none of them lives, or the time is up
wait_gone() {
  local n=$(($1 * 10)) p alive i
  shift
  for ((i = 0; i < n; i++)); do
    alive=0
    for p in "$@"; do alive "$p" && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  return 1
}

# 1. the jobs, while the controller still answers
if [[ -f $D/run/slurmctld.pid ]] && kill -0 "$(cat "$D/run/slurmctld.pid")" 2>/dev/null; then
  jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [[ -n ${jobs// } ]]; then
    # shellcheck disable=SC2086 # one word per job id
    SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null
    mapfile -t stepds < <(cluster_pids)
    ((${#stepds[@]})) && wait_gone 10 "${stepds[@]}"
  fi
fi

# 2. the daemons
pids=()
for s in slurmd slurmctld munged; do
  f=$D/run/$s.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null && pids+=("$pid")
done
((${#pids[@]})) && wait_gone 10 "${pids[@]}"
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
rm -f "$D"/run/*.pid

# 3. step daemons and jobs that outlived them
mapfile -t left < <(cluster_pids)
if ((${#left[@]})); then
  kill "${left[@]}" 2>/dev/null
  wait_gone 5 "${left[@]}" || kill -9 "${left[@]}" 2>/dev/null
fi
exit 0
