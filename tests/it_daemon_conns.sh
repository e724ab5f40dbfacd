#!/usr/bin/env bash
# Integration: the API's connections from one address are set by `tpuflow daemon
# --max-conns-per-ip N` or daemon.conf's max_conns_per_ip=N (the option wins); a value
# outside 1..256 is refused (exit 64, saying the range) (docs/daemon.md, docs/api.md).
# Stops only the daemons it started.
. "$(dirname "$0")/lib.sh" it_daemon_conns daemon-conns

for bad in 0 257 -1 2x ''; do
  expect 64 "--max-conns-per-ip wants a whole number from 1 to 256" -- \
    "$bin" daemon --home "$H" --listen 127.0.0.1:0 --max-conns-per-ip "$bad"
done
[[ ! -e $H/daemon.json ]] || fail "a daemon started with a bad --max-conns-per-ip"

# held N: opens N+1 connections to the daemon from 127.0.0.1, each kept open after its
# answer; prints the status of each (0: closed without an answer), then asks again on the
# first (the connections within the limit are still served)
held() {
  python3 - "${url##*:}" "$1" <<'PY'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
def ask(s):
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = s.recv(4096)
        return int(head.split()[1]) if head else 0
    except OSError:
        return 0
socks = []
for _ in range(n + 1):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    socks.append(s)
    print(ask(s), end=" ")
print(ask(socks[0]))
PY
}
url_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json"; }

start_daemon --max-conns-per-ip 2
url=$(url_of)
[[ $(held 2) == "200 200 0 200" ]] || fail "--max-conns-per-ip 2: $(held 2)"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon's exit"; dpid=

echo "max_conns_per_ip=3" >"$H/daemon.conf"
start_daemon
url=$(url_of)
[[ $(held 3) == "200 200 200 0 200" ]] || fail "daemon.conf max_conns_per_ip=3: $(held 3)"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon's exit"; dpid=

start_daemon --max-conns-per-ip 1 # the option wins over the file
url=$(url_of)
[[ $(held 1) == "200 0 200" ]] || fail "--max-conns-per-ip 1 over daemon.conf's 3: $(held 1)"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon's exit"; dpid=

echo "max_conns_per_ip=999" >"$H/daemon.conf"
start_daemon
grep -q "daemon.conf:1: ignored (expected .*max_conns_per_ip=1..256" "$dir/d.log" ||
  fail "a bad max_conns_per_ip in daemon.conf was not reported: $(tail -5 "$dir/d.log")"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon's exit"; dpid=
echo "it_daemon_conns: ok"
