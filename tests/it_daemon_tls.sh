#!/usr/bin/env bash
# it_daemon_tls.sh — `tpuflow daemon` serving its API over HTTPS (docs/api.md, "Listening,
# TLS and limits"): a certificate made here by openssl for 127.0.0.1, the daemon started with
# --tls-cert/--tls-key on a free loopback port; daemon.json names an https:// URL, curl checks
# the certificate against it and sees HSTS, `tpuflow --remote` reaches it with TPUFLOW_CACERT
# and refuses it without (exit 69). The refusals of the command line exit 78 without binding
# anything: plain HTTP on an address that is not loopback, a certificate without its key.
. "$(dirname "$0")/lib.sh" it_daemon_tls tls
command -v openssl >/dev/null || { echo "it_daemon_tls: openssl missing (scripts/deps.sh test)"; exit 77; }

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/key.pem" -out "$dir/cert.pem" \
  >"$dir/openssl.log" 2>&1 || fail "openssl could not make a certificate: $(cat "$dir/openssl.log")"

# refusals: nothing is bound, the configuration is wrong (78)
expect 78 "refusing to serve plain HTTP on the non-loopback address" -- \
  "$bin" daemon --home "$dir/h2" --listen 192.0.2.1:0
expect 78 "needs both a certificate and a key" -- \
  "$bin" daemon --home "$dir/h2" --listen 127.0.0.1:0 --tls-cert "$dir/cert.pem"
expect 64 "--auth is tokens or none" -- "$bin" daemon --home "$dir/h2" --auth maybe

"$bin" daemon --home "$H" --listen 127.0.0.1:0 --tls-cert "$dir/cert.pem" \
  --tls-key "$dir/key.pem" >>"$dir/d.log" 2>&1 &
dpid=$!
for _ in $(seq 1 200); do
  [[ -s $H/daemon.json ]] && grep -q "\"pid\": $dpid" "$H/daemon.json" && break
  sleep 0.05
done
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json") ||
  fail "the daemon did not start"
[[ $url == https://127.0.0.1:* ]] || fail "daemon.json names $url, not an https:// URL"
token=$("$bin" tokens create --home "$H" --name ci --scope read 2>/dev/null | grep -o 'tpf_[0-9a-f]*')

# curl checks the certificate; the answer carries HSTS; plain HTTP on that port gets nothing
curl -sS --cacert "$dir/cert.pem" -D "$dir/h.txt" -o "$dir/b.txt" "$url/healthz" ||
  fail "curl over https: $(cat "$dir/b.txt" 2>/dev/null)"
grep -qi '^strict-transport-security: max-age=' "$dir/h.txt" || fail "no HSTS header: $(cat "$dir/h.txt")"
code=$(curl -s --cacert "$dir/cert.pem" -o /dev/null -w '%{http_code}' \
  -H "Authorization: Bearer $token" "$url/api/v1/whoami")
[[ $code == 200 ]] || fail "whoami over https: $code"
curl -s -m 5 -o /dev/null "http://${url#https://}/healthz" && fail "plain HTTP was answered on the TLS port"

# the CLI: with the CA it lists runs, without it refuses the certificate (69, no answer)
expect 0 "RUN " -- env TPUFLOW_CACERT="$dir/cert.pem" TPUFLOW_TOKEN="$token" "$bin" --remote "$url" runs list
expect 69 "$url" -- env -u TPUFLOW_CACERT TPUFLOW_TOKEN="$token" "$bin" --remote "$url" runs list

kill -TERM "$dpid"; wait "$dpid" || fail "the daemon exited $? after SIGTERM"
dpid=
echo "it_daemon_tls: ok"
