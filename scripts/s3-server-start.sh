#!/usr/bin/env bash
# Starts a single-node OpenStack Swift with the s3api middleware on 127.0.0.1: a real
# S3-compatible server that checks SigV4 signatures, for the integration tests and benchmarks.
#   scripts/s3-server-start.sh DIR      (stop with scripts/s3-server-stop.sh DIR)
# Every port is picked free at start. Writes DIR/s3.env (TF_S3_ENDPOINT, credentials, region)
# and one pid file per process under DIR/run. Needs the `test` packages of scripts/deps.sh.
# Credentials: access key "test:tester" (it contains a colon), secret "testing", us-east-1.
set -euo pipefail
B=${1:?usage: $0 DIR}
mkdir -p "$B"
B=$(cd "$B" && pwd)
ETC=$B/etc SRV=$B/srv RUN=$B/run LOG=$B/log
rm -rf "$ETC" "$SRV" "$RUN"
mkdir -p "$ETC" "$SRV/sdb1" "$RUN" "$LOG"
# Debian's swift runs on the system python whatever python3 is first on PATH
PY=/usr/bin/python3
for t in swift-proxy-server swift-object-server swift-ring-builder memcached; do
  command -v $t >/dev/null || { echo "s3-server: '$t' is missing: run scripts/deps.sh test" >&2; exit 69; }
done

read -r P_ACC P_CON P_OBJ P_S3 P_MC < <("$(dirname "$0")"/free-ports.sh 5)

common() { cat <<EOC
[DEFAULT]
devices = $SRV
mount_check = false
bind_ip = 127.0.0.1
bind_port = $1
workers = 0
user = $(id -un)
swift_dir = $ETC
log_name = $2
log_facility = LOG_LOCAL0
EOC
}
for srv in account:$P_ACC container:$P_CON object:$P_OBJ; do
  n=${srv%%:*} p=${srv##*:}
  { common "$p" "$n"; printf '[pipeline:main]\npipeline = %s-server\n[app:%s-server]\nuse = egg:swift#%s\n' "$n" "$n" "$n"; } > "$ETC/$n-server.conf"
done
cat > "$ETC/swift.conf" <<EOC
[swift-hash]
swift_hash_path_suffix = tpuflow-test
swift_hash_path_prefix = tpuflow-test
EOC
cat > "$ETC/proxy-server.conf" <<EOC
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $P_S3
workers = 0
user = $(id -un)
swift_dir = $ETC
log_name = proxy
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
# virtual-hosted addressing for BUCKET.localhost (curl resolves *.localhost to loopback)
storage_domain = localhost
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
reseller_prefix = AUTH
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$P_MC
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOC
(
  cd "$ETC"
  for srv in account:$P_ACC container:$P_CON object:$P_OBJ; do
    n=${srv%%:*} p=${srv##*:}
    swift-ring-builder $n.builder create 6 1 1 >/dev/null
    swift-ring-builder $n.builder add r1z1-127.0.0.1:$p/sdb1 100 >/dev/null
    swift-ring-builder $n.builder rebalance >/dev/null 2>&1 || true
  done
)
memcached -u "$(id -un)" -l 127.0.0.1 -p "$P_MC" -U 0 -m 32 -d -P "$RUN/memcached.pid"
for s in account container object proxy; do
  SWIFT_CONF_FILE=$ETC/swift.conf nohup swift-$s-server "$ETC/$s-server.conf" > "$LOG/$s.log" 2>&1 &
  echo $! > "$RUN/$s.pid"
done
for port in $P_OBJ $P_CON $P_ACC $P_S3; do
  for _ in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
if ! curl -sf "http://127.0.0.1:$P_S3/healthcheck" >/dev/null; then
  echo "s3-server: the proxy did not come up on 127.0.0.1:$P_S3 (log: $LOG/proxy.log)" >&2
  tail -5 "$LOG/proxy.log" >&2 || true
  exit 69
fi
cat > "$B/s3.env" <<EOC
TF_S3_TEST_ENDPOINT=http://127.0.0.1:$P_S3
AWS_ENDPOINT_URL=http://127.0.0.1:$P_S3
AWS_REGION=us-east-1
AWS_ACCESS_KEY_ID=test:tester
AWS_SECRET_ACCESS_KEY=testing
EOC
echo "s3-server: Swift s3api on http://127.0.0.1:$P_S3 (env: $B/s3.env)"
