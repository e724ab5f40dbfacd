#!/usr/bin/env bash
# Prints N distinct TCP ports free on 127.0.0.1 just now, on one line: usage
#   scripts/free-ports.sh [N]     (N defaults to 1)
# The kernel picks them (bind to port 0), all held at once so they differ. Used by the
# scripts that start servers for the tests and benchmarks.
exec /usr/bin/python3 - "${1:-1}" <<'PY'
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
PY
