#!/usr/bin/env bash
# Integration: the s3:// backend, the checkpoint manager and `tpuflow store|ckpt` against a
# real S3 server on 127.0.0.1, directly and through tests/s3_fault_proxy.py failing 30% of
# requests. Stops exactly what it started. The server: Swift + s3api
# (scripts/s3-server-start.sh), or with TF_S3_IT_SERVER=rgw Ceph's RADOS Gateway
# (scripts/rgw-start.sh; tests/it_rgw.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
live=$root/$BUILD/tests/test_s3_live
server=${TF_S3_IT_SERVER:-swift}
me=it_s3 start=scripts/s3-server-start.sh stop=scripts/s3-server-stop.sh
[[ $server == rgw ]] && me=it_rgw start=scripts/rgw-start.sh stop=scripts/rgw-stop.sh
[[ -x $live && -x $bin ]] || { echo "$me: build first (make tests)"; exit 1; }
if [[ $server == rgw ]]; then
  command -v radosgw >/dev/null ||
    { echo "$me: skipped: Ceph's radosgw is not installed (scripts/deps.sh test)"; exit 77; }
elif ! command -v swift-proxy-server >/dev/null || ! command -v memcached >/dev/null; then
  scripts/deps.sh test || { echo "$me: cannot install the S3 server packages"; exit 1; }
fi
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

dir=$(mktemp -d "/tmp/tpuflow-$me.XXXXXX")
proxy_pid= hold_pid=
cleanup() {
  [[ -n $proxy_pid ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
  [[ -n $hold_pid ]] && kill "$hold_pid" 2>/dev/null && wait "$hold_pid" 2>/dev/null
  "$root/$stop" "$dir/s3"
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "$me: FAILED: $*"; exit 1; }

t0=$(date +%s.%N)
$start "$dir/s3" || fail "the S3 server did not start"
set -a
. "$dir/s3/s3.env"
set +a

$PY tests/s3_fault_proxy.py --upstream "$TF_S3_TEST_ENDPOINT" --rate 0.3 --seed 7 \
  --port-file "$dir/proxy.port" --stats "$dir/proxy.json" &
proxy_pid=$!
for _ in $(seq 1 100); do [[ -s $dir/proxy.port ]] && break; sleep 0.05; done
[[ -s $dir/proxy.port ]] || fail "the fault proxy did not start"
export TF_S3_FAULT_ENDPOINT=http://127.0.0.1:$(cat "$dir/proxy.port")

mkdir -p "$dir/work"
export TF_S3_TEST_BUCKET=it-$$
(cd "$dir/work" && TF_TEST_TMP="$dir/work" "$live") || fail "test_s3_live"
echo "$me: fault proxy: $(cat "$dir/proxy.json")"

# the CLI against the same server
cd "$dir/work"
b=cli-$$
"$bin" store mb "s3://$b" || fail "store mb"
printf 'hello s3\n' > hello.txt
"$bin" store put "s3://$b/docs/hello.txt" hello.txt || fail "store put"
[[ $("$bin" store cat "s3://$b/docs/hello.txt") == "hello s3" ]] || fail "store cat"
"$bin" store ls --json "s3://$b/docs/" | grep -q '"key": *"docs/hello.txt"' || fail "store ls --json"
"$bin" store ls "s3://$b/" | grep -q 'docs/hello.txt' || fail "store ls"
"$bin" store rm "s3://$b/docs/hello.txt" || fail "store rm"
"$bin" store cat "s3://$b/docs/hello.txt" 2>err.txt && fail "cat of a removed object succeeded"
grep -q "no object 'docs/hello.txt'" err.txt || fail "unclear missing-object error: $(cat err.txt)"
AWS_SECRET_ACCESS_KEY=wrong "$bin" store ls "s3://$b/" 2>err.txt; rc=$?
[[ $rc -eq 78 ]] || fail "wrong secret: exit code $rc, want 78"
grep -q "the credentials were rejected by $TF_S3_TEST_ENDPOINT" err.txt || fail "unclear wrong-secret error: $(cat err.txt)"
"$bin" ckpt list --json "s3://$b/none" | grep -q '"checkpoints": *\[\]' || fail "ckpt list of an empty prefix"

# checkpoints the live test left: steps 100 (pinned there), 400, 500
ck=s3://$TF_S3_TEST_BUCKET/run1/ckpt
"$bin" ckpt list --json "$ck" > list.json || fail "ckpt list"
grep -q '"latest": *500' list.json || fail "ckpt list: latest is not 500: $(cat list.json)"
"$bin" ckpt show "$ck" | grep -q 'checkpoint step 500' || fail "ckpt show"
"$bin" ckpt show --json "$ck" 400 | grep -q '"format": *"tpuflow-ckpt/1"' || fail "ckpt show --json 400"
"$bin" ckpt gc --json --keep 1 --pin 100 --grace 0 "$ck" > gc.json || fail "ckpt gc"
grep -q '"checkpoints_deleted": *1' gc.json || fail "ckpt gc deleted the wrong count: $(cat gc.json)"
"$bin" ckpt list --json "$ck" | tr -d ' \n' | grep -q '"step":100.*"step":500' || fail "ckpt gc kept the wrong steps"
"$bin" ckpt gc "$ck" 2>/dev/null; [[ $? -eq 64 ]] || fail "ckpt gc without --keep is not a usage error"

# a file changed while it is being uploaded is not stored (nor half old, half new): a second
# proxy holds the first big PUT until its last bytes are changed, for a multipart upload (one
# part thread, 16 MiB parts: the part held is part 1) and for a single PUT
$PY "$root/tests/s3_fault_proxy.py" --upstream "$TF_S3_TEST_ENDPOINT" --rate 0 \
  --port-file "$dir/hold.port" --hold "$dir/hold" &
hold_pid=$!
for _ in $(seq 1 100); do [[ -s $dir/hold.port ]] && break; sleep 0.05; done
[[ -s $dir/hold.port ]] || fail "the holding proxy did not start"
head -c $((32 << 20)) /dev/urandom > big.bin
for how in "TPUFLOW_S3_PART_SIZE=16M TPUFLOW_S3_PARALLEL=1" "TPUFLOW_S3_MULTIPART_THRESHOLD=1G"; do
  rm -f "$dir/hold.held" "$dir/hold.go"
  env $how AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$dir/hold.port")" \
    "$bin" store put "s3://$b/changed.bin" big.bin 2>err.txt &
  put_pid=$!
  for _ in $(seq 1 1200); do [[ -e $dir/hold.held ]] && break; sleep 0.05; done
  [[ -e $dir/hold.held ]] || fail "$how: the upload never reached the holding proxy"
  $PY -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek((16 << 20) - 1); c = f.read(1)[0]
f.seek((16 << 20) - 1); f.write(bytes([c ^ 0xFF]))' big.bin  # flip the last byte of part 1
  touch "$dir/hold.go"
  wait $put_pid && fail "$how: a file changed during its upload was stored"
  grep -q "changed while it was being uploaded" err.txt || fail "$how: unclear error: $(cat err.txt)"
  "$bin" store ls "s3://$b/" | grep -q changed.bin && fail "$how: an object was stored"
done
"$bin" store put "s3://$b/changed.bin" big.bin || fail "upload of the file once complete"
"$bin" store get "s3://$b/changed.bin" back.bin && cmp -s big.bin back.bin || fail "changed.bin round trip"

# an object uploaded in parts has the type the same file uploaded as one PUT has
TPUFLOW_S3_PART_SIZE=16M "$bin" store put "s3://$b/parts.bin" big.bin || fail "multipart upload"
printf 'machine 127.0.0.1\nlogin %s\npassword %s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > netrc
ctype() { # KEY: the object's Content-Type (netrc: Swift's access key has a colon)
  curl -sSf -I --aws-sigv4 "aws:amz:$AWS_REGION:s3" --netrc-file netrc \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$TF_S3_TEST_ENDPOINT/$b/$1" | tr -d '\r' |
    awk 'tolower($1) == "content-type:" {print $2}'
}
one=$(ctype changed.bin) parts=$(ctype parts.bin)
[[ -n $one && $parts == "$one" ]] || fail "Content-Type: '$parts' in parts, '$one' as one PUT"

echo "$me: passed in ${SECONDS} s"
