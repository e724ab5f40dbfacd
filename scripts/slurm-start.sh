#!/usr/bin/env bash
# Starts a one-node Slurm cluster on 127.0.0.1 for the integration tests and benchmarks: its
# own munged (key, socket, pid file under DIR), slurmctld and slurmd on free loopback ports,
# one node with 4 emulated TPU chips as the generic resource `tpu` (count only, no device
# files), no cgroups (proctrack/linuxproc, task/none), no accounting daemon: finished jobs go
# to a job completion log (jobcomp/filetxt, DIR/log/jobcomp.txt), which `sacct -c` reads.
#   scripts/slurm-start.sh DIR      (stop with scripts/slurm-stop.sh DIR)
# Writes DIR/slurm.env (SLURM_CONF, the node's name) and one pid file per daemon under
# DIR/run. Several clusters can run side by side: each has its own ports, node name and munge
# socket. Time limits are enforced quickly (OverTimeLimit=0, KillWait=2): a job over its
# --time is ended at the controller's next periodic check (every 30 s in Slurm 22.05).
# ReturnToService=1: a node an administrator set DOWN stays down until set RESUME.
# TF_SLURM_HIDE=DIR[:DIR...] makes the node a machine that does not share those directories
# with this one: slurmd (and so every job) runs in a mount namespace of its own where each of
# them is covered by an empty tmpfs (the submitter's state home, its TMPDIR).
# Needs the `test` packages of scripts/deps.sh (slurm-wlm, munge); runs as root (SlurmUser).
set -euo pipefail
D=${1:?usage: $0 DIR}
mkdir -p "$D"
D=$(cd "$D" && pwd)
for t in slurmctld slurmd munged sbatch squeue; do
  command -v $t >/dev/null || [[ -x /usr/sbin/$t ]] ||
    { echo "slurm-start: '$t' is missing: run scripts/deps.sh test" >&2; exit 69; }
done
rm -rf "$D/state" "$D/spool" "$D/run"
mkdir -p "$D/state" "$D/spool" "$D/run" "$D/log" "$D/munge"
chmod 0700 "$D/munge"
PY=/usr/bin/python3
read -r P_CTL P_D < <("$(dirname "$0")"/free-ports.sh 2)
host=$(hostname -s)
node=tf$P_D                       # unique per cluster, so two clusters never share a name
user=$(id -un)

# munge: a key of our own and a socket in DIR (the system's munged, if any, is left alone)
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$D/munge/munge.key"
sock=$D/munge/munge.socket
/usr/sbin/munged --force --key-file="$D/munge/munge.key" --socket="$sock" \
  --pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge/seed"
for _ in $(seq 1 100); do munge -S "$sock" -n >/dev/null 2>&1 && break; sleep 0.05; done
munge -S "$sock" -n | unmunge -S "$sock" >/dev/null ||
  { echo "slurm-start: munged did not come up (log: $D/log/munged.log)" >&2; exit 69; }

cat > "$D/slurm.conf" <<EOC
ClusterName=tpuflow
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=root
SlurmctldPort=$P_CTL
SlurmdPort=$P_D
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
ReturnToService=1
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
MessageTimeout=10
MinJobAge=600
OverTimeLimit=0
KillWait=2
InactiveLimit=0
SlurmdTimeout=300
GresTypes=tpu
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=tpu:4 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOC
cat > "$D/gres.conf" <<EOC
NodeName=$node Name=tpu Count=4
EOC
export SLURM_CONF=$D/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF"
slurmd=(/usr/sbin/slurmd -f "$SLURM_CONF" -N "$node")
if [[ -n ${TF_SLURM_HIDE:-} ]]; then
  IFS=: read -ra hide <<< "$TF_SLURM_HIDE"
  for h in "${hide[@]}"; do
    [[ $h == /* && -d $h ]] ||
      { echo "slurm-start: TF_SLURM_HIDE: '$h' is not an absolute path of a directory" >&2; exit 64; }
  done
  # slurmd daemonizes inside the namespace, which lives as long as it and its jobs do
  unshare --mount --propagation private /bin/sh -c '
    while [ "$1" != -- ]; do mount -t tmpfs -o size=1m,mode=0755 tpuflow-hidden "$1" || exit 69; shift; done
    shift; exec "$@"' sh "${hide[@]}" -- "${slurmd[@]}" ||
    { echo "slurm-start: cannot start slurmd with ${hide[*]} hidden (unshare/mount)" >&2; exit 69; }
else
  "${slurmd[@]}"
fi
ok=0
for _ in $(seq 1 150); do
  st=$(sinfo -h -n "$node" -o '%T' 2>/dev/null || true)
  [[ $st == idle ]] && { ok=1; break; }
  sleep 0.1
done
if ((!ok)); then
  echo "slurm-start: node $node is not idle (state '${st:-?}'; logs in $D/log)" >&2
  tail -5 "$D/log/slurmctld.log" "$D/log/slurmd.log" >&2 || true
  exit 69
fi
cat > "$D/slurm.env" <<EOC
SLURM_CONF=$D/slurm.conf
TF_SLURM_NODE=$node
EOC
echo "slurm-start: node $node idle with $(sinfo -h -n "$node" -o '%G'), controller on 127.0.0.1:$P_CTL (env: $D/slurm.env)"
