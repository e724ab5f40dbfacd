#!/usr/bin/env bash
# Object-storage throughput: a 64 MiB checkpoint file uploaded to and downloaded from a local
# S3 server (Swift + s3api on 127.0.0.1), by tpuflow and by the curl command line doing the
# same PUT/GET (curl --aws-sigv4) in the same run; then the checkpoint manager saving and
# loading a 64 MiB checkpoint (build/bench/s3_ckpt). Medians of TF_BENCH_REPS runs (3).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
reps=${TF_BENCH_REPS:-3}
[[ -x $bin ]] || { echo "s3 bench: build first (make)"; exit 1; }
command -v swift-proxy-server >/dev/null || scripts/deps.sh test || exit 1
command -v curl >/dev/null || scripts/deps.sh bench || exit 1
[[ -x $BUILD/bench/s3_ckpt ]] || make --no-print-directory BUILD="$BUILD" "$BUILD/bench/s3_ckpt" >/dev/null

dir=$(mktemp -d /tmp/tpuflow-bench-s3.XXXXXX)
trap '"$root/scripts/s3-server-stop.sh" "$dir/s3"; rm -rf "$dir"' EXIT
scripts/s3-server-start.sh "$dir/s3" >/dev/null || exit 1
set -a
. "$dir/s3/s3.env"
set +a
E=$AWS_ENDPOINT_URL
# curl splits --user at the first colon and Swift's access key has one: use a netrc file
printf 'machine 127.0.0.1\nlogin %s\npassword %s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$dir/netrc"
curl_s3() {
  curl -sSf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --netrc-file "$dir/netrc" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
"$bin" store mb s3://bench || exit 1
head -c $((64 << 20)) /dev/urandom > "$dir/ckpt.bin"

now() { date +%s.%N; }
declare -A t
run() { # name command...
  local a b
  a=$(now)
  "${@:2}" || { echo "s3 bench: '$1' failed"; exit 1; }
  b=$(now)
  t[$1]+="$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.4f", b-a}') "
}
for ((r = 0; r < reps; r++)); do
  run tf_put "$bin" store put s3://bench/tf/ckpt.bin "$dir/ckpt.bin"
  run tf_put1 env TPUFLOW_S3_MULTIPART_THRESHOLD=1G "$bin" store put s3://bench/tf/one.bin "$dir/ckpt.bin"
  run curl_put curl_s3 -T "$dir/ckpt.bin" "$E/bench/curl/ckpt.bin" -o /dev/null
  run tf_get "$bin" store get s3://bench/tf/ckpt.bin "$dir/tf.out"
  run curl_get curl_s3 -o "$dir/curl.out" "$E/bench/curl/ckpt.bin"
  cmp -s "$dir/ckpt.bin" "$dir/tf.out" || { echo "s3 bench: tpuflow download differs"; exit 1; }
  cmp -s "$dir/ckpt.bin" "$dir/curl.out" || { echo "s3 bench: curl download differs"; exit 1; }
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
echo "64 MiB object, $reps runs each, medians (Swift s3api on 127.0.0.1; $(nproc) cores)"
printf '%-6s %10s %14s %10s %12s %8s\n' op "tpuflow s" "tpuflow MiB/s" "curl s" "curl MiB/s" ratio
for op in put put1 get; do
  a=$(median "${t[tf_$op]}") b=$(median "${t[curl_${op%1}]}")
  awk -v op="$op" -v a="$a" -v b="$b" 'BEGIN{printf "%-6s %10.3f %14.1f %10.3f %12.1f %8.2f\n", op, a, 64/a, b, 64/b, b/a}'
done
echo "(ratio = curl time / tpuflow time. put: tpuflow's default multipart, 8 MiB parts, 4 in"
echo " parallel; put1: one request (TPUFLOW_S3_MULTIPART_THRESHOLD=1G). tpuflow signs the"
echo " SHA-256 payload and sends Content-MD5 and a CRC-32C, checked on get; curl sends"
echo " UNSIGNED-PAYLOAD in one request and checks nothing)"
TF_S3_BENCH_URL=s3://bench/ckpt TF_BENCH_REPS=$reps "$BUILD/bench/s3_ckpt"
