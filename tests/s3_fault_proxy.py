#!/usr/bin/env python3
"""s3_fault_proxy.py — an HTTP proxy for the S3 tests that fails a set fraction of requests.

It sits between the client and the S3 server on 127.0.0.1 and, for each request, with
probability --rate, injects one fault chosen uniformly:

  slowdown  answer 503 SlowDown without forwarding (S3 throttling)
  reset     reset the TCP connection: either before forwarding (the request is lost) or after
            forwarding, half-way through the answer's body (the request took effect but its
            answer is lost: the hard case for idempotency)
  corrupt   flip one byte: of an object GET's answer body (the client must detect it), or of a
            PUT's request body (the server must refuse it: the signed SHA-256)

Requests without a body to corrupt (HEAD, DELETE, POST, listings) get a 503 instead of
"corrupt", since S3 offers no checksum for listings. The Host header is passed through
unchanged, so SigV4 signatures made for the proxy's address stay valid.

With --hold PATH it also holds a PUT whose body is at least 8 MiB before reading that body,
when PATH.held does not exist: it creates PATH.held and reads on once PATH.go exists, so that
a test can change the file being uploaded while the client is in the middle of sending it.

Python standard library only (runs on a clean Debian 12). Usage:
  s3_fault_proxy.py --upstream http://127.0.0.1:PORT --rate 0.3 --seed 7 \\
                    --port-file FILE [--stats FILE] [--hold PATH]
It listens on a free port of 127.0.0.1, writes the port to --port-file, and rewrites the
--stats JSON ({"requests": n, "slowdown": n, "reset": n, "corrupt": n}) after each request.
"""
import argparse
import http.client
import http.server
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer",
       "upgrade"}


class State:
    def __init__(self, args):
        self.rate = args.rate
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "slowdown": 0, "reset": 0, "corrupt": 0}
        self.stats_file = args.stats
        self.hold = args.hold  # path prefix, or None
        u = urllib.parse.urlsplit(args.upstream)
        self.up_host, self.up_port = u.hostname, u.port or 80

    def draw(self):
        """Returns (fault or None, a random number for the fault's details)."""
        with self.lock:
            self.stats["requests"] += 1
            if self.rng.random() >= self.rate:
                return None, 0.0
            return self.rng.choice(("slowdown", "reset", "corrupt")), self.rng.random()

    def count(self, fault):
        with self.lock:
            self.stats[fault] += 1
            if self.stats_file:
                tmp = self.stats_file + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(self.stats, f)
                os.replace(tmp, self.stats_file)


def is_object_path(path):
    """Path-style /bucket/key (not a bucket-level request such as a listing)."""
    p = urllib.parse.urlsplit(path).path
    return p.count("/") >= 2 and not p.endswith("/")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main

    def log_message(self, fmt, *args):  # quiet
        pass

    def reset(self):
        """Drops the connection with a TCP RST."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def send_slowdown(self):
        body = (b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>SlowDown</Code>"
                b"<Message>Please reduce your request rate.</Message></Error>")
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def forward(self, body):
        conn = http.client.HTTPConnection(self.state.up_host, self.state.up_port, timeout=60)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in HOP:
                conn.putheader(k, v)
        conn.endheaders(body if body else None)
        resp = conn.getresponse()
        data = resp.read()
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
        status, reason = resp.status, resp.reason
        conn.close()
        return status, reason, headers, data

    def hold(self):
        """Holds a big PUT's body until the test says go, unless one is held (--hold)."""
        path = self.state.hold
        with self.state.lock:
            if os.path.exists(path + ".held"):
                return
            open(path + ".held", "w").close()
        for _ in range(6000):
            if os.path.exists(path + ".go"):
                return
            time.sleep(0.01)

    def handle_any(self):
        st = self.state
        n = int(self.headers.get("Content-Length") or 0)
        if st.hold and self.command == "PUT" and n >= 8 << 20:
            self.hold()
        body = self.rfile.read(n) if n else b""
        fault, r = st.draw()
        if fault == "corrupt":
            if self.command == "PUT" and body:
                i = int(r * len(body)) % len(body)
                body = body[:i] + bytes([body[i] ^ 0x5A]) + body[i + 1:]
            elif not (self.command == "GET" and is_object_path(self.path)):
                fault = "slowdown"
        if fault == "slowdown":
            st.count(fault)
            self.send_slowdown()
            return
        if fault == "reset" and r < 0.5:
            st.count(fault)
            self.reset()  # the request never reaches the server
            return
        try:
            status, reason, headers, data = self.forward(body)
        except OSError as e:
            self.send_error(502, "upstream: %s" % e)
            return
        if fault == "corrupt" and self.command == "GET":
            if 200 <= status < 300 and data:
                i = int(r * len(data)) % len(data)
                data = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:]
            else:
                fault = None  # nothing to corrupt; the request passes
        if fault:
            st.count(fault)
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            cl = dict((k.lower(), v) for k, v in headers).get("content-length", "0")
            self.send_header("Content-Length", cl)
            self.end_headers()
            if fault == "reset":
                self.reset()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if fault == "reset":
            self.wfile.write(data[: len(data) // 2])  # half the body, then RST
            self.reset()
            return
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # resets are intended: stay quiet
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--stats")
    ap.add_argument("--hold")
    args = ap.parse_args()
    Handler.state = State(args)
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.replace(tmp, args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
