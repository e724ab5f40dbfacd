#!/usr/bin/env bash
# Integration: who drives a run, with real processes (docs/runs.md, "Who drives a run").
#  1. kill -9 of `tpuflow run` during a long shell step: the step's leader dies with it
#     (parent-death signal); what it started lives on in the recorded process group until a
#     resume ends it, and after the resume exactly one copy of the step runs.
#  2. two `runs resume` of that crashed run at once: exactly one takes it (exit 0 at the end),
#     the other exits 75 at once with a message naming the owner.
#  3. `runs resume` of a run whose owner is alive exits 75; `--force` takes it over with a
#     warning, and the old owner stops at its next heartbeat (exit 75, no end recorded).
#  4. `runs cancel` stops a run driven by another process within a few seconds: failed.
# Stops only the processes it started.
. "$(dirname "$0")/lib.sh" it_runs_owner owner
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # groups of step processes this test started (recorded in marks): never left behind
  if [[ -f $dir/marks ]]; then
    while read -r _ pid; do kill -KILL -- "-$pid" 2>/dev/null; done <"$dir/marks"
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
tag=$$ # distinct sleep lengths name this test's processes in ps
long=$((100000 + tag % 100000))
# Attempt 1 starts a long child and waits for it (the child outlives a killed leader);
# later attempts take 2 s. Each attempt appends "ATTEMPT PID" (PID leads its group) to marks.
cat >"$dir/p.yaml" <<YAML
name: owner
steps:
  - name: long
    type: shell
    cache: false
    with:
      argv: [sh, -c, 'echo "\$TPUFLOW_ATTEMPT \$\$" >> $dir/marks; if [ "\$TPUFLOW_ATTEMPT" = 1 ]; then sleep $long & wait; else sleep 2.$tag; fi']
YAML
count() { ps -eo args= | grep -c "^sleep $1\$"; }
wait_marks() { # wait until marks has $1 lines
  for _ in $(seq 1 400); do [[ -f $dir/marks && $(wc -l <"$dir/marks") -ge $1 ]] && return 0; sleep 0.05; done
  return 1
}
run_id() { "$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'; }

# ---- 1 + 2: crash, orphan, resume race
"$bin" run "$dir/p.yaml" --home "$H" --plain >"$dir/run1.log" 2>&1 &
runpid=$!; pids+=($runpid)
wait_marks 1 || fail "the step never started: $(cat "$dir/run1.log")"
sleep 0.3
kill -KILL "$runpid"; wait "$runpid" 2>/dev/null
sleep 0.3
leader=$(awk 'NR==1 {print $2}' "$dir/marks")
[[ $(count $long) == 1 ]] || fail "expected the orphaned child of attempt 1 to outlive the engine (found $(count $long))"
kill -0 "$leader" 2>/dev/null && [[ $(ps -o stat= -p "$leader") != Z* ]] &&
  fail "the step's leader $leader outlived its killed engine (no parent-death signal)"
run=$(run_id)
"$bin" runs resume "$run" --home "$H" --plain >"$dir/r1.log" 2>&1 &
a=$!; pids+=($a)
"$bin" runs resume "$run" --home "$H" --plain >"$dir/r2.log" 2>&1 &
b=$!; pids+=($b)
wait "$a"; ra=$?
wait "$b"; rb=$?
codes=$(printf '%s\n' "$ra" "$rb" | sort | tr '\n' ' ')
[[ $codes == "0 75 " ]] || fail "two resumes exited '$codes', expected one 0 and one 75: $(cat "$dir/r1.log" "$dir/r2.log")"
grep -q "is being driven by process" "$dir/r1.log" "$dir/r2.log" || fail "the refused resume did not say who drives the run"
[[ $(count $long) == 0 ]] || fail "the orphan of attempt 1 is still running after the resume"
[[ $(wc -l <"$dir/marks") == 2 ]] || fail "expected exactly one new attempt, marks: $(cat "$dir/marks")"
"$bin" runs show "$run" --home "$H" --json >"$dir/show.json"
python3 - "$dir/show.json" <<'PY' || fail "runs show: $(cat "$dir/show.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "succeeded", d["state"]
att = d["steps"][0]["attempts_detail"]
assert [a["state"] for a in att] == ["lost", "succeeded"], att
assert all(a["pgid"] for a in att), att
assert d["owner"] is None, d["owner"]
PY
echo "it_runs_owner: crash + orphan + resume race ok"

# ---- 3: a live owner; --force
rm -f "$dir/marks"
"$bin" run "$dir/p.yaml" --home "$H" --plain >"$dir/run2.log" 2>&1 &
runpid=$!; pids+=($runpid)
wait_marks 1 || fail "second run: the step never started"
run=$(run_id)
"$bin" runs resume "$run" --home "$H" >"$dir/r3.log" 2>&1
[[ $? == 75 ]] || fail "resume of a live run did not exit 75: $(cat "$dir/r3.log")"
"$bin" runs resume "$run" --home "$H" --force --plain >"$dir/r4.log" 2>&1 &
forcer=$!; pids+=($forcer)
wait "$runpid"; rc=$?
[[ $rc == 75 ]] || fail "the owner that was taken over exited $rc, expected 75: $(tail -3 "$dir/run2.log")"
wait "$forcer"; rc=$?
[[ $rc == 0 ]] || fail "resume --force exited $rc: $(cat "$dir/r4.log")"
grep -q "taken over by force" "$dir/r4.log" || fail "--force gave no warning: $(cat "$dir/r4.log")"
[[ $(count $long) == 0 ]] || fail "the first owner's step still runs after --force"
echo "it_runs_owner: --force ok"

# ---- 4: runs cancel from another process
rm -f "$dir/marks"
"$bin" run "$dir/p.yaml" --home "$H" --plain >"$dir/run3.log" 2>&1 &
runpid=$!; pids+=($runpid)
wait_marks 1 || fail "third run: the step never started"
run=$(run_id)
t0=$(date +%s.%N)
"$bin" runs cancel "$run" --home "$H" >"$dir/c.log" 2>&1 || fail "runs cancel: $(cat "$dir/c.log")"
wait "$runpid"; rc=$?
t1=$(date +%s.%N)
[[ $rc == 1 ]] || fail "the cancelled run exited $rc, expected 1 (failed)"
"$bin" runs show "$run" --home "$H" --json | grep -q '"state": "failed"' || fail "cancelled run is not failed"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 20 else 1)" || fail "cancel took $(python3 -c "print($t1 - $t0)") s"
[[ $(count $long) == 0 ]] || fail "the cancelled run's step still runs"
echo "it_runs_owner: ok"
