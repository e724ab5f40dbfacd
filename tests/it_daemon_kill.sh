#!/usr/bin/env bash
# Integration: `tpuflow daemon` killed with -9 in the middle of a burst of 1000 POST /api/v1/runs
# (500 Idempotency-Keys, each sent twice: the repeat of key i goes out with the first send of
# key i+100, so repeats of keys acknowledged before the kill arrive after the restart) and
# started again on the same home and port. The clients behave like CI jobs: a request that
# gets no answer (connection refused or reset while the daemon is down) is sent again with
# the same key and body; a 429 is sent again after its Retry-After. Checked:
#  - no 5xx, ever; every request ends with a 2xx;
#  - every key is answered with one run, whichever send and whichever daemon answered it
#    (replays, marked Idempotent-Replayed, name the run of the first answer);
#  - every acknowledged run exists after the restart, and exactly 500 runs were created;
#  - the kill landed inside the burst (some requests were refused, some acknowledged before).
# docs/api.md (Idempotency), docs/daemon.md. Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_daemon_kill daemon-kill
"$bin" db migrate --home "$H" >/dev/null || { echo "it_daemon_kill: FAILED: db migrate"; exit 1; }
tok=$("$bin" tokens create --home "$H" --name drill --scope trigger 2>/dev/null | grep -o 'tpf_[A-Za-z0-9_]*' | head -1)
[[ -n $tok ]] || { echo "it_daemon_kill: FAILED: no token"; exit 1; }

python3 - "$bin" "$H" "$tok" "$dir" <<'PY'
import http.client, json, os, signal, sqlite3, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

bin_, home, tok, tmp = sys.argv[1:5]
KEYS, LAG, KILL_AT = 500, 100, 250
log = open(os.path.join(tmp, "d.log"), "ab")
procs = []

def fail(msg):
    print("it_daemon_kill: FAILED:", msg)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    sys.stdout.flush()
    os._exit(1)

def start(listen):
    p = subprocess.Popen([bin_, "daemon", "--home", home, "--listen", listen, "--grace", "5s"],
                         stdout=log, stderr=log)
    procs.append(p)
    info = os.path.join(home, "daemon.json")
    for _ in range(400):
        if p.poll() is not None:
            return None
        try:
            j = json.load(open(info))
            if j["pid"] == p.pid:
                return p, j["listen"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    fail("the daemon did not write daemon.json")

got = start("127.0.0.1:0")
if not got:
    fail("the daemon did not start")
daemon, addr = got
state = {"addr": addr, "acked": 0, "refused": 0, "down": False}
lock = threading.Lock()
yaml = ("name: drill\nsteps:\n"
        "  - {name: a, type: shell, with: {argv: [/bin/true]}}\n"
        "  - {name: b, type: shell, needs: [a], with: {argv: [/bin/true]}}\n")
bodies = [json.dumps({"yaml": yaml, "labels": {"drill": "1", "i": str(i)}}) for i in range(KEYS)]
# the order of the sends: key i's first send, then the repeat of key i-LAG
order = []
for i in range(KEYS + LAG):
    if i < KEYS:
        order.append(i)
    if i >= LAG:
        order.append(i - LAG)
answers = [None] * len(order)  # (status, run id, replayed, the daemon's pid)
fivexx = []

def send(slot):
    key = order[slot]
    while True:
        with lock:
            host, port = state["addr"].rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            c.request("POST", "/api/v1/runs", body=bodies[key],
                      headers={"Authorization": "Bearer " + tok,
                               "Idempotency-Key": "drill-%d" % key,
                               "Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            with lock:
                state["refused"] += 1
            time.sleep(0.05)
            continue
        finally:
            c.close()
        if r.status >= 500:
            fivexx.append((key, r.status, data[:300]))
            return
        if r.status == 429:
            time.sleep(float(r.getheader("Retry-After") or 1))
            continue
        if r.status // 100 != 2:
            fail("key %d: HTTP %d %s" % (key, r.status, data[:300]))
        run = json.loads(data)["id"]
        with lock:
            state["acked"] += 1
            answers[slot] = (r.status, run, r.getheader("Idempotent-Replayed") == "true",
                             daemon.pid)
        return

def killer():
    global daemon
    while True:
        with lock:
            if state["acked"] >= KILL_AT:
                break
        time.sleep(0.002)
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait()
    with lock:
        state["acked_at_kill"] = state["acked"]
        state["refused_at_kill"] = state["refused"]
    time.sleep(0.5)  # down for a while: requests are refused
    got = start(state["addr"]) or start("127.0.0.1:0")  # the same port when it is free
    if not got:
        fail("the daemon did not start again")
    with lock:
        daemon, state["addr"] = got

t0 = time.monotonic()
k = threading.Thread(target=killer)
k.start()
with ThreadPoolExecutor(max_workers=32) as ex:
    list(ex.map(send, range(len(order))))
k.join()
took = time.monotonic() - t0

if fivexx:
    fail("%d answers were 5xx, e.g. %s" % (len(fivexx), fivexx[:3]))
if state["acked_at_kill"] >= len(order):
    fail("the kill came after the burst")
if state["refused"] == state["refused_at_kill"]:
    fail("no request was refused while the daemon was down")
runs = {}
for slot, a in enumerate(answers):
    if a is None:
        fail("request %d got no answer" % slot)
    runs.setdefault(order[slot], set()).add(a[1])
multi = {k: v for k, v in runs.items() if len(v) != 1}
if multi:
    fail("keys answered with more than one run: %s" % list(multi.items())[:3])
replayed = sum(1 for a in answers if a[2])
# repeats answered by the second daemon of keys the first one acknowledged
first_pid = procs[0].pid
across = sum(1 for k in runs if any(a[3] == first_pid and order[s] == k for s, a in enumerate(answers))
             and any(a[3] != first_pid and order[s] == k for s, a in enumerate(answers)))

db = sqlite3.connect(os.path.join(home, "tpuflow.db"), timeout=30)
ids = {r[0] for r in db.execute("SELECT run_id FROM run_labels WHERE key='drill'")}
if len(ids) != KEYS:
    fail("%d runs carry the drill label, expected %d" % (len(ids), KEYS))
for key, (run,) in ((k, tuple(v)) for k, v in runs.items()):
    if not db.execute("SELECT 1 FROM runs WHERE id=?", (run,)).fetchone():
        fail("key %d was acknowledged with run %s, which does not exist" % (key, run))
    row = db.execute("SELECT response FROM idempotency_keys WHERE key=?",
                     ("drill-%d" % key,)).fetchone()
    if not row or json.loads(row[0]).get("id") != run:
        fail("the record of key %d does not name its run %s: %s" % (key, run, row))
db.close()
print("it_daemon_kill: %d requests in %.1f s; killed after %d acknowledgements; %d sends "
      "refused or reset; %d replays (%d keys answered by both daemons); %d runs, one per key"
      % (len(order), took, state["acked_at_kill"], state["refused"], replayed, across, len(ids)))
daemon.send_signal(signal.SIGTERM)
try:
    rc = daemon.wait(timeout=30)
except subprocess.TimeoutExpired:
    daemon.kill()
    daemon.wait()
    fail("the restarted daemon did not drain within 30 s")
if rc != 0:
    fail("the restarted daemon exited %d after SIGTERM" % rc)
PY
rc=$?
if ((rc != 0)); then
  tail -20 "$dir/d.log"
  exit 1
fi
echo "it_daemon_kill: ok"
