#!/bin/sh
# ci-run.sh — start a tpuflow run from CI with curl alone, follow its events, and exit with
# its result (0 succeeded, 1 failed or interrupted, 2 the API refused or could not be reached).
#
#   TPUFLOW_URL=https://tpuflow.example:8470 TPUFLOW_TOKEN=tpf_... \
#     scripts/ci-run.sh pipelines/shell-hello.yaml greeting=hi
#
# The request carries an Idempotency-Key, and curl retries it with the same key, so a retried
# trigger never starts a second run. The event stream is resumed with Last-Event-ID when it
# breaks. Needs curl 7.76+ and a POSIX shell; nothing else (docs/ci.md).
set -eu
: "${TPUFLOW_URL:?set TPUFLOW_URL to the daemon, e.g. http://127.0.0.1:8470}"
: "${TPUFLOW_TOKEN:?set TPUFLOW_TOKEN to a token of scope trigger}"
[ $# -ge 1 ] || { echo "usage: $0 PIPELINE.yaml [NAME=VALUE ...]" >&2; exit 2; }
file=$1
shift
url=${TPUFLOW_URL%/}
auth="Authorization: Bearer $TPUFLOW_TOKEN"
key=$(cat /proc/sys/kernel/random/uuid 2>/dev/null || echo "ci-$$-$(date +%s)")

# JSON strings: escape backslash, quote and tab; lines joined with \n.
json_str() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' | awk '{ printf "%s\\n", $0 }'; }
params=""
for kv in "$@"; do
  k=$(printf '%s' "${kv%%=*}" | json_str | sed 's/\\n$//')
  v=$(printf '%s' "${kv#*=}" | json_str | sed 's/\\n$//')
  params="$params${params:+,}\"$k\":\"$v\""
done
body="{\"yaml\":\"$(json_str < "$file")\",\"params\":{$params}}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s' "$body" > "$tmp/body"
code=$(curl -sS -o "$tmp/resp" -w '%{http_code}' --retry 5 --retry-all-errors \
  -H "$auth" -H "Idempotency-Key: $key" -H 'Content-Type: application/json' \
  --data-binary "@$tmp/body" "$url/api/v1/runs") || { echo "cannot reach $url" >&2; exit 2; }
if [ "$code" != 201 ]; then
  echo "tpuflow refused the run (HTTP $code):" >&2
  cat "$tmp/resp" >&2
  echo >&2
  exit 2
fi
run=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$tmp/resp")
echo "run $run submitted"

# Follow the events until the stream's `end` event; reconnect after the last id seen.
last=0
while :; do
  { curl -sS -N -H "$auth" -H "Last-Event-ID: $last" "$url/api/v1/runs/$run/events" || true; } |
    tee "$tmp/events" | sed -n 's/^data: //p'
  id=$(sed -n 's/^id: //p' "$tmp/events" | tail -n 1)
  [ -n "$id" ] && last=$id
  if grep -q '^event: end' "$tmp/events"; then
    state=$(sed -n '/^event: end/,/^$/s/.*"state":"\([^"]*\)".*/\1/p' "$tmp/events")
    echo "run $run $state"
    [ "$state" = succeeded ] && exit 0
    exit 1
  fi
  sleep 2
done
