#!/usr/bin/env bash
# Object-storage throughput: a 64 MiB checkpoint file uploaded to and downloaded from a local
# S3 server by tpuflow and by the curl command line doing the same PUT/GET (curl --aws-sigv4)
# in the same run; then the checkpoint manager saving and loading a 64 MiB checkpoint
# (build/bench/s3_ckpt). Medians of TF_BENCH_REPS runs (3).
# Servers (TF_BENCH_S3_SERVER=swift|rgw|both; default both when radosgw is installed, else
# swift), one after the other, each on 127.0.0.1: OpenStack Swift with s3api
# (scripts/s3-server-start.sh, the integration tests' server) and Ceph's RADOS Gateway on a
# one-node cluster (scripts/rgw-start.sh). Every upload of tpuflow's is read back and checked:
# same bytes from both clients, the object's CRC-32C in its metadata, 2 parts for multipart.
# Beside the times, the CPU each operation cost the client and the server's processes (Swift's
# proxy, object, container and account servers; radosgw and the OSD), from /proc/PID/stat: on
# a loaded 2-core machine the time follows the CPU all of them need, and these figures depend
# little on the load.
# Peers: curl with UNSIGNED-PAYLOAD (what the curl CLI does by default), curl with the
# payload's SHA-256 signed (hashed by `openssl dgst` first, as tpuflow does), and for GET curl
# writing the file and then `sync FILE` (tpuflow's downloads are fsynced before the rename).
# Both clients GET the same object (tpuflow's multipart upload).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
reps=${TF_BENCH_REPS:-3}
servers=${TF_BENCH_S3_SERVER:-}
if [[ -z $servers ]]; then
  servers=swift
  command -v radosgw >/dev/null && servers=both
fi
case $servers in
  swift | rgw) ;;
  both) servers="swift rgw" ;;
  *) echo "s3 bench: TF_BENCH_S3_SERVER must be swift, rgw or both, not '$servers'"; exit 64 ;;
esac
[[ -x $bin ]] || { echo "s3 bench: build first (make)"; exit 1; }
command -v swift-proxy-server >/dev/null || scripts/deps.sh test || exit 1
command -v curl >/dev/null || scripts/deps.sh bench || exit 1
[[ $servers != *rgw* ]] || command -v radosgw >/dev/null || scripts/deps.sh bench || exit 1
[[ -x $BUILD/bench/s3_ckpt ]] || make --no-print-directory BUILD="$BUILD" "$BUILD/bench/s3_ckpt" >/dev/null

dir=$(mktemp -d /tmp/tpuflow-bench-s3.XXXXXX)
trap '"$root/scripts/s3-server-stop.sh" "$dir/swift"; "$root/scripts/rgw-stop.sh" "$dir/rgw"
      rm -rf "$dir"' EXIT
head -c $((64 << 20)) /dev/urandom > "$dir/ckpt.bin"
# curl splits --user at the first colon and Swift's access key has one: use a netrc file
curl_s3() {
  curl -sSf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --netrc-file "$dir/netrc" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
# the curl CLI uploading with the payload's SHA-256 signed, like tpuflow (hashing included)
curl_signed() { # FILE URL
  local h
  h=$(openssl dgst -sha256 -r "$1" | cut -d' ' -f1) || return 1
  curl -sSf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --netrc-file "$dir/netrc" \
    -H "x-amz-content-sha256: $h" -T "$1" "$2" -o /dev/null
}
curl_get_sync() { # URL FILE: download, then fsync the file
  curl_s3 -o "$2" "$1" && sync "$2"
}
head_of() { # KEY HEADER: that header of the object, from a HEAD request
  curl_s3 -I "$AWS_ENDPOINT_URL/bench/$1" | tr -d '\r' |
    awk -v h="$2" 'tolower($1) == tolower(h) ":" {print $2}'
}
# tpuflow's uploads, read back: both downloads are the file, the multipart object went up as 2
# parts (its ETag), and both objects carry the CRC-32C that tpuflow's get checked the bytes
# against (the same value, however each upload computed it)
check_round() {
  local crc crc1 etag
  cmp -s "$dir/ckpt.bin" "$dir/tf.out" || { echo "s3 bench: tpuflow's download differs"; return 1; }
  cmp -s "$dir/ckpt.bin" "$dir/curl.out" || { echo "s3 bench: curl's download differs"; return 1; }
  etag=$(head_of tf/ckpt.bin ETag) crc=$(head_of tf/ckpt.bin x-amz-meta-tf-crc32c)
  crc1=$(head_of tf/one.bin x-amz-meta-tf-crc32c)
  [[ $etag == *-2\" ]] || { echo "s3 bench: the multipart object's ETag is $etag, not 2 parts"; return 1; }
  [[ -n $crc && $crc == "$crc1" ]] ||
    { echo "s3 bench: CRC-32C metadata '$crc' (multipart), '$crc1' (one PUT)"; return 1; }
}

now() { date +%s.%N; }
tick_ms=$((1000 / $(getconf CLK_TCK)))
server_cpu() { # ms of CPU used so far by the server's processes
  local p s=0
  for p in "${server_pids[@]}"; do
    s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo $((s * tick_ms))
}
client_cpu() { # ms of CPU used so far by this shell's finished children (times runs here,
  times > "$dir/times" # not in a subshell, whose children would be its own)
  awk 'NR == 2 {split($1, u, /[ms]/); split($2, s, /[ms]/)
    printf "%.0f", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1000}' "$dir/times"
}
declare -A t cc sc tc
run() { # name command...
  local a b ca cb sa sb
  sa=$(server_cpu) a=$(now)
  client_cpu > "$dir/cpu.a"
  "${@:2}" || { echo "s3 bench: '$1' failed"; exit 1; }
  client_cpu > "$dir/cpu.b"
  b=$(now) sb=$(server_cpu) ca=$(<"$dir/cpu.a") cb=$(<"$dir/cpu.b")
  t[$1]+="$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.4f", b-a}') "
  cc[$1]+="$((cb - ca)) " sc[$1]+="$((sb - sa)) " tc[$1]+="$((cb - ca + sb - sa)) "
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
row() { # op tf-key curl-key peer-name
  local a b
  a=$(median "${t[$2]}") b=$(median "${t[$3]}")
  awk -v op="$1" -v a="$a" -v b="$b" -v p="$4" 'BEGIN{printf "%-6s %10.3f %14.1f %-22s %10.3f %12.1f %8.2f\n", op, a, 64/a, p, b, 64/b, b/a}'
}

bench_server() { # swift|rgw
  local srv=$1 name between=: k r
  if [[ $srv == swift ]]; then
    scripts/s3-server-start.sh "$dir/swift" >/dev/null || exit 1
    server_pids=()
    for k in proxy object container account; do server_pids+=("$(cat "$dir/swift/run/$k.pid")"); done
    name="Swift s3api" srv_cpu="Swift's processes"
  else
    scripts/rgw-start.sh "$dir/rgw" >/dev/null || exit 1
    server_pids=("$(cat "$dir/rgw/run/rgw.pid")" "$(cat "$dir/rgw/run/osd.pid")")
    name="Ceph radosgw $(radosgw --version | awk '{print $3}'), ${TF_RGW_STORE:-memstore} OSD"
    srv_cpu="radosgw and ceph-osd"
    # overwritten objects' data freed at once, not left to grow the OSD's work round by round
    between="radosgw-admin -c $dir/rgw/ceph.conf gc process --include-all"
  fi
  set -a
  . "$dir/$srv/s3.env"
  set +a
  local E=$AWS_ENDPOINT_URL
  printf 'machine 127.0.0.1\nlogin %s\npassword %s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$dir/netrc"
  "$bin" store mb s3://bench || exit 1
  # one untimed upload first: a server makes what a bucket's first objects and multipart
  # uploads need then (radosgw: its data pools; Swift: the segments container)
  "$bin" store put s3://bench/warm.bin "$dir/ckpt.bin" || exit 1
  t=() cc=() sc=() tc=()
  for ((r = 0; r < reps; r++)); do
    run tf_put "$bin" store put s3://bench/tf/ckpt.bin "$dir/ckpt.bin"
    run tf_put1 env TPUFLOW_S3_MULTIPART_THRESHOLD=1G "$bin" store put s3://bench/tf/one.bin "$dir/ckpt.bin"
    run curl_put curl_s3 -T "$dir/ckpt.bin" "$E/bench/curl/ckpt.bin" -o /dev/null
    run curl_puts curl_signed "$dir/ckpt.bin" "$E/bench/curl/signed.bin"
    run tf_get "$bin" store get s3://bench/tf/ckpt.bin "$dir/tf.out"
    run curl_get curl_s3 -o "$dir/curl.out" "$E/bench/tf/ckpt.bin"
    run curl_gets curl_get_sync "$E/bench/tf/ckpt.bin" "$dir/curl.out"
    check_round || exit 1
    $between >/dev/null 2>&1 || { echo "s3 bench: '$between' failed"; exit 1; }
  done
  echo "64 MiB object, $reps runs each, medians ($name on 127.0.0.1; $(nproc) cores)"
  printf '%-6s %10s %14s %-22s %10s %12s %8s\n' op "tpuflow s" "tpuflow MiB/s" "curl peer" "curl s" "curl MiB/s" ratio
  row put tf_put curl_put "unsigned payload"
  row put tf_put curl_puts "signed SHA-256"
  row put1 tf_put1 curl_put "unsigned payload"
  row put1 tf_put1 curl_puts "signed SHA-256"
  row get tf_get curl_get "-o FILE"
  row get tf_get curl_gets "-o FILE + sync FILE"
  for k in tf_put tf_put1 curl_put curl_puts tf_get curl_get curl_gets; do
    printf '%s range: %s\n' "$k" "$(tr ' ' '\n' <<<"${t[$k]}" | grep . | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf "%.3f-%.3f s", a, b}')"
  done
  echo "CPU per operation, medians (ms): client (tpuflow or curl, with openssl for the signed"
  echo "peer), server ($srv_cpu), total"
  for k in tf_put tf_put1 curl_put curl_puts tf_get curl_get curl_gets; do
    printf '%-10s client %5s  server %5s  total %5s\n' "$k" "$(median "${cc[$k]}")" \
      "$(median "${sc[$k]}")" "$(median "${tc[$k]}")"
  done
  echo "(ratio = curl time / tpuflow time. put: tpuflow's default multipart, 2 parts of 32 MiB in"
  echo " parallel; put1: one request (TPUFLOW_S3_MULTIPART_THRESHOLD=1G). tpuflow signs the"
  echo " payload's SHA-256 (the server checks it) and stores a CRC-32C that every get checks;"
  echo " tpuflow's get writes a temp file, fsyncs and renames it; every round's uploads read back"
  echo " and checked)"
  TF_S3_BENCH_URL=s3://bench/ckpt TF_BENCH_REPS=$reps "$BUILD/bench/s3_ckpt" || exit 1
  if [[ $srv == swift ]]; then scripts/s3-server-stop.sh "$dir/swift"; else scripts/rgw-stop.sh "$dir/rgw"; fi
}
for s in $servers; do
  bench_server "$s"
done
