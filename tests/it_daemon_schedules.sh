#!/usr/bin/env bash
# Integration: cron schedules fired by a real `tpuflow daemon` (docs/daemon.md, Schedules).
# Downtime is made by moving a registered pipeline's first unhandled tick (next_tick) back in
# the database while no daemon runs, as if the daemon had been down that long:
#  - catchup: all (catchup_max 3) fires the 3 newest missed ticks, oldest first, and records
#    the older ones missed; catchup: latest fires only the newest; each fired tick is one run;
#  - concurrency: forbid records a tick `skipped` while the pipeline's run is still running;
#  - after kill -9 and a restart, no tick is handled twice: every fire key has one row, every
#    fired row one run, and no run was made that no fired row names.
# Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_daemon_schedules daemon-sched
export TPUFLOW_LOG=info

q() { python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
for r in db.execute(sys.argv[2], sys.argv[3:]).fetchall():
    print(*r)
db.commit()' "$H/tpuflow.db" "$@"; }
# waits until SQL (a count) prints N
wait_count() {
  local n=$1; shift
  for _ in $(seq 1 300); do
    [[ $(q "$@") == "$n" ]] && return 0
    sleep 0.1
  done
  return 1
}

cat >"$dir/all.yaml" <<'YAML'
name: every-all
schedule: {cron: "* * * * *", catchup: all, catchup_max: 3, concurrency: allow}
steps:
  - {name: s, type: shell, with: {argv: ['true']}}
YAML
cat >"$dir/latest.yaml" <<'YAML'
name: every-latest
schedule: {cron: "* * * * *", catchup: latest, concurrency: allow}
steps:
  - {name: s, type: shell, with: {argv: ['true']}}
YAML
cat >"$dir/forbid.yaml" <<'YAML'
name: every-forbid
schedule: {cron: "0 * * * *", catchup: latest, concurrency: forbid}
steps:
  - {name: s, type: shell, with: {argv: [sleep, '600']}}
YAML
for f in all latest forbid; do
  "$bin" pipelines add "$dir/$f.yaml" --home "$H" >/dev/null || fail "pipelines add $f.yaml"
done

# ten minutes of downtime: the first unhandled tick 10 minutes back (on a minute boundary);
# not in the last seconds of a minute, so the daemon handles the same ticks as are computed here
while (( $(date +%s) % 60 > 45 )); do sleep 1; done
now=$(date +%s)
back=$(( (now / 60) * 60 - 600 ))
q "UPDATE registered_pipelines SET next_tick=? WHERE name IN ('every-all', 'every-latest') RETURNING name" \
  "$back" >/dev/null
start_daemon --grace 5s
wait_count 3 "SELECT count(*) FROM schedule_fires WHERE pipeline='every-all' AND outcome='fired'" ||
  fail "catchup all did not fire 3 ticks: $(q "SELECT fire_key, outcome FROM schedule_fires")"
wait_count 1 "SELECT count(*) FROM schedule_fires WHERE pipeline='every-latest' AND outcome='fired'" ||
  fail "catchup latest did not fire 1 tick"
# the ticks handled so far: those of the downtime and maybe one more if a minute turned
ticks=$(q "SELECT count(*) FROM schedule_fires WHERE pipeline='every-all'")
(( ticks >= 11 )) || fail "only $ticks ticks of every-all were handled"
python3 - "$H/tpuflow.db" "$back" <<'PY' || fail "the catch-up did not go by the policy"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
back = int(sys.argv[2])
for name, fired_n in (("every-all", 3), ("every-latest", 1)):
    rows = db.execute("SELECT tick, outcome, run_id FROM schedule_fires WHERE pipeline=? "
                      "AND tick < ? ORDER BY tick", (name, back + 660)).fetchall()
    assert [r[0] for r in rows] == list(range(back, back + 660, 60)), rows
    fired = [r for r in rows if r[1] == "fired"]
    assert len(fired) == fired_n, (name, rows)
    # the newest ticks fired, the older ones were missed
    assert all(r[1] == "missed" for r in rows[:-fired_n]), (name, rows)
    assert [r[0] for r in fired] == [r[0] for r in rows[-fired_n:]], (name, rows)
    for r in fired:
        st, trig = db.execute("SELECT state, trigger FROM runs WHERE id=?", (r[2],)).fetchone()
        assert trig == "schedule", (r, trig)
print("it_daemon_schedules: after 10 minutes down: catchup all fired 3 ticks, latest 1; the "
      "rest recorded missed")
PY
[[ $? == 0 ]] || exit 1

# forbid: while a run of every-forbid is active (started by hand; it sleeps), its due tick (this
# hour's, made due by moving next_tick back to it) is recorded skipped
"$bin" run "$dir/forbid.yaml" --home "$H" --detach >/dev/null || fail "run forbid.yaml --detach"
wait_count 1 "SELECT count(*) FROM runs WHERE pipeline='every-forbid' AND state='running'" ||
  fail "the every-forbid run did not start"
hour=$(( ($(date +%s) / 3600) * 3600 ))
q "UPDATE registered_pipelines SET next_tick=? WHERE name='every-forbid' RETURNING name" \
  "$hour" >/dev/null
wait_count 1 "SELECT count(*) FROM schedule_fires WHERE pipeline='every-forbid' AND tick=$hour AND outcome='skipped'" ||
  fail "forbid did not skip a tick while the run was active: $(q "SELECT fire_key, outcome, reason FROM schedule_fires WHERE pipeline='every-forbid'")"
[[ $(q "SELECT count(*) FROM runs WHERE pipeline='every-forbid'") == 1 ]] ||
  fail "a run of every-forbid was started while one was active"
grep -q "every-forbid@[0-9]*: skipped" "$dir/d.log" || fail "the daemon did not log the skipped tick"
echo "it_daemon_schedules: forbid skipped a tick while the pipeline's run was active"

# kill -9 and a restart: nothing handled twice
kill -KILL "$dpid"; wait "$dpid" 2>/dev/null; dpid=
before=$(q "SELECT count(*) FROM runs")
start_daemon --grace 5s
sleep 3 # a few rounds of the schedules job
python3 - "$H/tpuflow.db" "$before" <<'PY' || fail "a tick was handled twice after the restart"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
dup = db.execute("SELECT pipeline, tick, count(*) FROM schedule_fires GROUP BY pipeline, tick "
                 "HAVING count(*) > 1").fetchall()
assert not dup, dup
fired = db.execute("SELECT run_id FROM schedule_fires WHERE outcome='fired'").fetchall()
runs = db.execute("SELECT id FROM runs WHERE trigger='schedule'").fetchall()
assert sorted(fired) == sorted(runs), (fired, runs)
n = db.execute("SELECT count(*) FROM runs").fetchone()[0]
new_ticks = n - int(sys.argv[2])
assert new_ticks <= 2, ("runs made by the restart alone", new_ticks)  # a minute may turn
print("it_daemon_schedules: restart after kill -9: every tick handled once (%d fired, %d runs)"
      % (len(fired), n))
PY
[[ $? == 0 ]] || exit 1
kill -TERM "$dpid"; wait "$dpid"; rc=$?; dpid=
[[ $rc == 0 ]] || fail "the daemon exited $rc after SIGTERM"
echo "it_daemon_schedules: ok"
