#!/usr/bin/env bash
# Starts a throwaway one-node Ceph cluster with a RADOS Gateway on 127.0.0.1: a second real
# S3 server (beside Swift's s3api, scripts/s3-server-start.sh) for the benchmarks.
#   scripts/rgw-start.sh DIR      (stop with scripts/rgw-stop.sh DIR)
# One monitor, one manager, one OSD (TF_RGW_STORE: memstore, the default — objects held in
# the OSD's memory, up to 4 GiB — or bluestore on a sparse 10 GiB file in DIR), and radosgw
# with the beast frontend. No cephx (auth none), pools of size 1. Every port is picked free at
# start; nothing listens beyond 127.0.0.1. Writes DIR/s3.env (the same variables as
# scripts/s3-server-start.sh) and one pid file per process under DIR/run. Needs the `bench`
# packages of scripts/deps.sh (radosgw ceph-mon ceph-osd ceph-mgr).
# Credentials: access key "tpuflow", secret "tpuflow-secret", region us-east-1.
set -euo pipefail
B=${1:?usage: $0 DIR}
STORE=${TF_RGW_STORE:-memstore}
case $STORE in memstore | bluestore) ;; *)
  echo "rgw: TF_RGW_STORE must be memstore or bluestore, not '$STORE'" >&2; exit 64 ;;
esac
for t in ceph-mon ceph-mgr ceph-osd radosgw radosgw-admin ceph monmaptool curl; do
  command -v $t >/dev/null || { echo "rgw: '$t' is missing: run scripts/deps.sh bench" >&2; exit 69; }
done
mkdir -p "$B"
B=$(cd "$B" && pwd)
RUN=$B/run LOG=$B/log
rm -rf "$B/mon" "$B/mgr" "$B/osd" "$RUN" "$LOG" "$B/ceph.conf" "$B/monmap" "$B/s3.env"
mkdir -p "$B/mon" "$B/mgr" "$B/osd" "$RUN" "$LOG"

read -r P_MON P_RGW < <("$(dirname "$0")"/free-ports.sh 2)
FSID=$(cat /proc/sys/kernel/random/uuid)
C=$B/ceph.conf
cat > "$C" <<EOC
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$P_MON
public addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
# without it the clients' monitor login is refused (-13) and retried for minutes
ms mon client mode = crc secure
run dir = $RUN
admin socket = $RUN/\$name.asok
log file = $LOG/\$name.log
log to stderr = false
err to stderr = true
mon cluster log file = $LOG/cluster.log
crash dir = $B/crash
keyring = /dev/null
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 2
mon data avail crit = 1
# osdmap changes (radosgw creating its pools at first start) committed without the 1 s batching
paxos propose interval = 0.05
[mon]
mon data = $B/mon
[mgr]
mgr data = $B/mgr
# none of the optional modules (the always-on ones load anyway)
mgr disabled modules = alerts influx insights iostat localpool mirroring nfs osd_perf_query osd_support prometheus restful selftest snap_schedule stats telegraf test_orchestrator zabbix
[osd]
osd data = $B/osd
osd objectstore = $STORE
memstore device bytes = $((4 << 30))
bluestore block size = $((10 << 30))
bluestore block create = true
bluestore fsck on mkfs = false
osd memory target = $((1 << 30))
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$P_RGW
# virtual-hosted addressing for BUCKET.localhost too (curl resolves *.localhost to loopback)
rgw dns name = localhost
# deleted and overwritten objects' data is freed by the next gc pass, not hours later
rgw gc obj min wait = 0
rgw enable usage log = false
EOC

# a bounded wait, with the log's tail when it fails
wait_for() { # what log command...
  local what=$1 log=$2
  shift 2
  for _ in $(seq 1 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "rgw: $what did not come up within 60 s (log: $log)" >&2
  tail -5 "$log" >&2 || true
  exit 69
}
start() { # name command... (foreground daemons, so the pid file is ours)
  local n=$1
  shift
  nohup "$@" -f > "$LOG/$n.out" 2>&1 &
  echo $! > "$RUN/$n.pid"
}

monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$P_MON]" "$B/monmap" >/dev/null
ceph-mon -c "$C" --mkfs -i a --monmap "$B/monmap" > "$LOG/mon-mkfs.out" 2>&1 ||
  { echo "rgw: ceph-mon --mkfs failed (log: $LOG/mon-mkfs.out)" >&2; tail -5 "$LOG/mon-mkfs.out" >&2; exit 69; }
start mon ceph-mon -c "$C" -i a
wait_for "the monitor" "$LOG/mon.a.log" bash -c "exec 3<>/dev/tcp/127.0.0.1/$P_MON"
start mgr ceph-mgr -c "$C" -i x

OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(timeout 60 ceph -c "$C" osd new "$OSD_UUID" 2> "$LOG/osd-new.out") ||
  { echo "rgw: 'ceph osd new' failed (log: $LOG/osd-new.out, $LOG/mon.a.log)" >&2; tail -5 "$LOG/osd-new.out" >&2; exit 69; }
ceph-osd -c "$C" -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" > "$LOG/osd-mkfs.out" 2>&1 ||
  { echo "rgw: ceph-osd --mkfs failed (log: $LOG/osd-mkfs.out)" >&2; tail -5 "$LOG/osd-mkfs.out" >&2; exit 69; }
start osd ceph-osd -c "$C" -i "$OSD_ID"
# radosgw waits for the OSD by itself (its first requests create its pools)
start rgw radosgw -c "$C" -n client.rgw
wait_for "radosgw (or the OSD: $LOG/osd.$OSD_ID.log)" "$LOG/client.rgw.log" curl -sf -o /dev/null "http://127.0.0.1:$P_RGW/"
radosgw-admin -c "$C" user create --uid tpuflow --display-name tpuflow \
  --access-key tpuflow --secret-key tpuflow-secret > "$LOG/user.out" 2>&1 ||
  { echo "rgw: radosgw-admin user create failed (log: $LOG/user.out)" >&2; tail -5 "$LOG/user.out" >&2; exit 69; }
cat > "$B/s3.env" <<EOC
TF_S3_TEST_ENDPOINT=http://127.0.0.1:$P_RGW
AWS_ENDPOINT_URL=http://127.0.0.1:$P_RGW
AWS_REGION=us-east-1
AWS_ACCESS_KEY_ID=tpuflow
AWS_SECRET_ACCESS_KEY=tpuflow-secret
EOC
echo "rgw: Ceph radosgw ($STORE) on http://127.0.0.1:$P_RGW (env: $B/s3.env)"
