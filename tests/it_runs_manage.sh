#!/usr/bin/env bash
# Integration: managing the runs of a home (docs/runs.md, "Finding runs" and "Deleting runs
# and retention"): labels, `runs list` filters, `runs show` params, `runs delete` (refusing a
# live run, taking an orphaned one, keeping what a model version or a later run uses) and
# `tpuflow gc` (dry run by default, --apply); then `runs delete` and `gc` through a daemon's
# API (--remote, an admin token): the same text and JSON as here, a live run refused, a run
# whose object store does not answer kept, a read token refused. Runs in about 20 s.
. "$(dirname "$0")/lib.sh" it_runs_manage runs
bg=
trap '[[ -n $bg ]] && kill -9 "$bg" 2>/dev/null; [[ -n $dpid ]] && kill -9 "$dpid" 2>/dev/null; rm -rf "$dir"' EXIT
ids() { "$bin" runs list --home "$H" --json "$@" | python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin)))'; }
count() { local n; n=$(ids "$@" | wc -w); echo "$n"; }

cat >"$dir/lab.yaml" <<'EOF'
name: lab
params:
  n: {type: int, default: 3}
  who: {type: string, default: world}
steps:
  - {name: a, type: shell, with: {argv: [sh, -c, 'echo hello $0', "${params.who}"]}}
  - {name: b, type: shell, needs: [a], when: "${params.n} > 5", with: {argv: [/bin/true]}}
EOF
cat >"$dir/bad.yaml" <<'EOF'
name: bad
steps:
  - {name: a, type: shell, with: {argv: [/bin/false]}}
EOF

# 1. labels, kept with the run, shown and selected on; params with where they came from
expect 0 "" -- "$bin" run "$dir/lab.yaml" --home "$H" --plain --label team=ml --label exp=7
expect 0 "" -- "$bin" run "$dir/lab.yaml" --home "$H" --plain --param n=9
expect 1 "" -- "$bin" run "$dir/bad.yaml" --home "$H" --plain --label team=ops
expect 64 "--label wants NAME=VALUE" -- "$bin" run "$dir/lab.yaml" --home "$H" --label oops
[[ $(count --label team) == 2 ]] || fail "--label team selected $(count --label team) runs"
[[ $(count --label team=ml) == 1 ]] || fail "--label team=ml selected $(count --label team=ml) runs"
[[ $(count --label team=nobody) == 0 ]] || fail "--label team=nobody selected runs"
labelled=$(ids --label exp=7)
expect 0 "labels: exp=7,team=ml" -- "$bin" runs show "$labelled" --home "$H"
out=$("$bin" runs show "$labelled" --home "$H")
grep -q "n = 3  (default)" <<<"$out" || fail "runs show did not list the default param n: $out"
grep -q "who = world  (default)" <<<"$out" || fail "runs show did not list param who: $out"
expect 0 "n = 9  (--param)" -- "$bin" runs show "$(ids --pipeline lab | cut -d' ' -f1)" --home "$H"
expect 0 "exp=7,team=ml" -- "$bin" runs list --home "$H"

# 2. filters: pipeline, state, since (an age or a date), combined
[[ $(count --pipeline lab) == 2 ]] || fail "--pipeline lab"
[[ $(count --state failed) == 1 ]] || fail "--state failed"
[[ $(count --state failed --label team=ml) == 0 ]] || fail "--state failed --label team=ml"
[[ $(count --since 1h) == 3 ]] || fail "--since 1h"
[[ $(count --since "2999-01-01") == 0 ]] || fail "--since a future date"
[[ $(count --since "2000-01-01 00:00") == 3 ]] || fail "--since an old date"
expect 64 "--since wants an age" -- "$bin" runs list --home "$H" --since yesterday
expect 64 "--state wants" -- "$bin" runs list --home "$H" --state done
"$bin" runs list --home "$H" --json --label team | python3 -c '
import json,sys
rs = json.load(sys.stdin)
assert all("team" in r["labels"] for r in rs), rs
assert all(r["done"] + r["skipped"] <= r["steps"] for r in rs), rs
' || fail "runs list --json labels/done/skipped"

# 3. delete: what a model version and a later run (its cache hits) use stays
expect 0 "succeeded" -- "$bin" run pipelines/tabular-csv.yaml --home "$H" --plain
first=$(ids --pipeline tabular-csv)
expect 0 "cache hits: 3" -- "$bin" run pipelines/tabular-csv.yaml --home "$H" --plain
objs=$H/objects/runs/$first
[[ -f $objs/train/logs/attempt-1.log ]] || fail "no train log to delete under $objs"
expect 0 "would delete run $first" -- "$bin" runs delete "$first" --dry-run --home "$H"
[[ -f $objs/train/logs/attempt-1.log ]] || fail "a dry run deleted objects"
expect 0 "model tabular-csv v1" -- "$bin" runs delete "$first" --home "$H"
[[ ! -e $objs/train/logs/attempt-1.log ]] || fail "runs delete left the run's log"
[[ -f $objs/train/bundle/signature.json ]] || fail "runs delete removed a registered bundle"
[[ -f $objs/prep/data/manifest.json ]] || fail "runs delete removed a dataset a later run uses"
expect 66 "no run" -- "$bin" runs show "$first" --home "$H"
expect 66 "no run" -- "$bin" runs delete "$first" --home "$H"
[[ -z $(sqlite3 "$H/tpuflow.db" "SELECT run_id FROM events WHERE run_id='$first' UNION SELECT run_id FROM attempts WHERE run_id='$first' UNION SELECT run_id FROM steps WHERE run_id='$first' UNION SELECT run_id FROM step_cache WHERE run_id='$first'") ]] \
  || fail "rows of the deleted run are left"
expect 0 "v1    run $first" -- "$bin" models show tabular-csv --home "$H"
# the later run still reads what it took from the deleted run's cache
expect 0 "succeeded" -- "$bin" runs show "$(ids --pipeline tabular-csv)" --home "$H"

# 4. a live run is refused; once its process is gone (orphaned) it may go
cat >"$dir/slow.yaml" <<'EOF'
name: slow
steps:
  - {name: s, type: shell, with: {argv: [sleep, "30"]}}
EOF
"$bin" run "$dir/slow.yaml" --home "$H" --plain >/dev/null 2>&1 &
bg=$!
for _ in $(seq 100); do [[ $(count --state running) == 1 ]] && break; sleep 0.1; done
slow=$(ids --state running)
[[ -n $slow ]] || fail "the slow run never ran"
expect 75 "is running" -- "$bin" runs delete "$slow" --home "$H"
kill -9 "$bg"; wait "$bg" 2>/dev/null; bg=
[[ $(ids --state orphaned) == "$slow" ]] || fail "the killed run is not listed as orphaned"
expect 0 "orphaned" -- "$bin" runs list --home "$H"
expect 0 "deleted run $slow" -- "$bin" runs delete "$slow" --home "$H"
[[ ! -d $H/work/$slow ]] || fail "runs delete left the scratch directory"

# 5. gc: a policy, a dry run by default, --apply removes
expect 64 "give a policy" -- "$bin" gc --home "$H"
before=$(count)
expect 0 "dry run: nothing was removed" -- "$bin" gc --home "$H" --keep-last 1
[[ $(count) == "$before" ]] || fail "gc without --apply removed runs"
expect 0 "nothing to remove" -- "$bin" gc --home "$H" --older-than 1d
out=$("$bin" gc --home "$H" --keep-last 1 --pipeline lab --apply --json) || fail "gc --apply: $out"
python3 -c '
import json,sys
d = json.loads(sys.argv[1])
assert d["applied"] and len(d["runs"]) == 1 and d["runs"][0]["deleted"], d
' "$out" || fail "gc --apply --json: $out"
[[ $(count --pipeline lab) == 1 ]] || fail "gc --keep-last 1 --pipeline lab left $(count --pipeline lab) runs"
[[ $(count --pipeline bad) == 1 ]] || fail "gc --pipeline lab touched another pipeline"
expect 0 "" -- "$bin" gc --home "$H" --keep-last 0 --apply
[[ $(count) == 0 ]] || fail "gc --keep-last 0 left runs"

# 6. the same through a daemon's API (docs/api.md): --remote runs delete and gc print what
# the local commands print and leave what they leave; a live run and a read token are refused
for _ in 1 2 3; do expect 0 "" -- "$bin" run "$dir/lab.yaml" --home "$H" --plain; done
read -r r3 r2 r1 <<<"$(ids --pipeline lab)"
# an S3 endpoint nobody answers at (a port just free), for a run whose store is gone
closed=$(scripts/free-ports.sh)
export AWS_ENDPOINT_URL=http://127.0.0.1:$closed AWS_ACCESS_KEY_ID=it AWS_SECRET_ACCESS_KEY=it AWS_REGION=us-east-1
"$bin" daemon --home "$H" --listen 127.0.0.1:0 >>"$dir/d.log" 2>&1 &
dpid=$!
for _ in $(seq 1 200); do
  [[ -s $H/daemon.json ]] && grep -q "\"pid\": $dpid" "$H/daemon.json" && break
  sleep 0.05
done
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$H/daemon.json") || fail "the daemon did not start"
token() { "$bin" tokens create --home "$H" --name "$1" --scope "$1" 2>/dev/null | grep -o 'tpf_[A-Za-z0-9_]*' | head -1; }
admin=$(token admin) reader=$(token read)
R() { TPUFLOW_TOKEN=$admin "$bin" --remote "$url" "$@"; }
# runs show: the local command's text, params included
diff <("$bin" runs show "$r3" --home "$H" 2>&1) <(R runs show "$r3" 2>&1) \
  || fail "--remote runs show printed otherwise than the local command"
expect 0 "who = world  (default)" -- R runs show "$r3"
log1=$H/objects/runs/$r1/a/logs/attempt-1.log
[[ -f $log1 ]] || fail "no log of run $r1 to delete at $log1"
# a dry run: the local command's text and JSON, nothing removed
diff <("$bin" runs delete "$r1" --dry-run --home "$H" 2>&1) <(R runs delete "$r1" --dry-run 2>&1) \
  || fail "--remote runs delete --dry-run printed otherwise than the local command"
diff <("$bin" runs delete "$r1" "$r2" --dry-run --home "$H" --json) <(R runs delete "$r1" "$r2" --dry-run --json) \
  || fail "--remote runs delete --dry-run --json printed otherwise than the local command"
expect 0 "would delete run $r1: 1 object(s)" -- R runs delete "$r1" --dry-run
expect 0 "would delete run $r3: 1 object(s)" -- R runs delete latest --dry-run
# an ambiguous prefix (every run id starts with 2) is a usage error here too (64)
expect 64 "run id prefix '2' is ambiguous" -- R runs delete 2 --dry-run
diff <("$bin" runs delete 2 --home "$H" 2>&1) <(R runs delete 2 2>&1) \
  || fail "--remote runs delete of an ambiguous prefix said otherwise than the local command"
[[ -f $log1 && $(count --pipeline lab) == 3 ]] || fail "a remote dry run deleted something"
# a read token may not delete (exit 78, as for every 401/403 of --remote): nothing removed
expect 78 "403" -- env TPUFLOW_TOKEN="$reader" "$bin" --remote "$url" runs delete "$r1"
expect 78 "403" -- env TPUFLOW_TOKEN="$reader" "$bin" --remote "$url" gc --keep-last 0 --apply
[[ -f $log1 && $(count --pipeline lab) == 3 ]] || fail "a refused remote delete deleted something"
# the delete: its log, rows and scratch directory go; a second one finds no run (66)
expect 0 "deleted run $r1: 1 object(s)" -- R runs delete "$r1"
[[ ! -e $log1 ]] || fail "--remote runs delete left the run's log"
[[ ! -d $H/work/$r1 ]] || fail "--remote runs delete left the scratch directory"
[[ -z $(sqlite3 "$H/tpuflow.db" "SELECT id FROM runs WHERE id='$r1' UNION SELECT run_id FROM steps WHERE run_id='$r1'") ]] \
  || fail "rows of the run deleted through the API are left"
expect 66 "no run '$r1' (see 'tpuflow runs list')" -- R runs delete "$r1"
expect 64 "needs a run id" -- R runs delete --dry-run
# a live run (the daemon drives it) is refused with the local command's words and code (75)
live=$(R run "$dir/slow.yaml" --detach | awk '{print $2}')
for _ in $(seq 100); do [[ $(count --state running --pipeline slow) == 1 ]] && break; sleep 0.1; done
expect 75 "is running" -- R runs delete "$live"
out=$(R --json runs delete "$live"); rc=$?
python3 -c '
import json, sys
[r] = json.loads(sys.argv[2])
assert r["run"] == sys.argv[1] and not r["deleted"] and r["reason"] == "busy", r' "$live" "$out" \
  && [[ $rc == 75 ]] || fail "--remote --json runs delete of a live run: exit $rc, $out"
[[ -n $(ids --pipeline slow) ]] || fail "the live run was deleted"
expect 0 "cancel: $live" -- R runs cancel "$live"
for _ in $(seq 200); do [[ $(count --state failed --pipeline slow) == 1 ]] && break; sleep 0.1; done
expect 0 "  cancelled at " -- R runs show "$live"
# acting on a finished run: a cancel has nothing left to stop and says where the run is; a
# retry of a succeeded run is a conflict (409: exit 1, as the local command), not a 500
expect 0 "cancel: $live  (the run is now failed)" -- R runs cancel "$live"
expect 1 "409 Conflict: run '$r3' is succeeded: nothing to retry" -- R runs retry "$r3"
# a pipeline with errors: each under the file's own name, as the local command says it (65)
printf 'name: bad\nsteps:\n  - name: a\n    type: shel\n' >"$dir/bad.yaml"
expect 65 "$dir/bad.yaml:4:11: error: unknown step type 'shel'" -- R run "$dir/bad.yaml"
# logs: a step's as the local command prints them; an unknown step is the API's 404 (66)
expect 0 "==> attempt 1 <==" -- R runs logs "$r3" a
expect 66 "404 Not Found: run $r3 has no step 'zz'" -- R runs logs "$r3" zz
# a run whose object store does not answer stays, with the local command's words and code (69)
cat >"$dir/far.yaml" <<'EOF'
name: far
steps:
  - {name: a, type: shell, with: {argv: [/bin/true]}}
EOF
expect 0 "" -- "$bin" run "$dir/far.yaml" --home "$H" --plain
far=$(ids --pipeline far)
sqlite3 "$H/tpuflow.db" "UPDATE runs SET storage='s3://gone/far' WHERE id='$far'"
expect 69 "its object store s3://gone/far cannot be listed" -- R runs delete "$far"
diff <("$bin" runs delete "$far" --home "$H" 2>&1) <(R runs delete "$far" 2>&1) \
  || fail "--remote runs delete of a run whose store is gone said otherwise than the local command"
# the report of a refused delete: the one the daemon's problem carries, as the local one
diff <("$bin" runs delete "$far" --home "$H" --json) <(R runs delete "$far" --json) \
  || fail "--remote runs delete --json of a run whose store is gone said otherwise than the local command"
# runs show --json: the local command's text, byte for byte
diff <("$bin" runs show "$far" --home "$H" --json) <(R runs show "$far" --json) \
  || fail "--remote runs show --json printed otherwise than the local command"
out=$(R --json gc --keep-last 0 --pipeline far --apply); rc=$?
python3 -c '
import json, sys
d = json.loads(sys.argv[2])
[r] = d["runs"]
assert r["run"] == sys.argv[1] and not r["deleted"] and r["reason"] == "unavailable", d' "$far" "$out" \
  && [[ $rc == 69 ]] || fail "--remote --json gc of a run whose store is gone: exit $rc, $out"
[[ $(ids --pipeline far) == "$far" ]] || fail "the run whose store is gone was deleted"
sqlite3 "$H/tpuflow.db" "UPDATE runs SET storage='file://$H/objects' WHERE id='$far'"
expect 0 "deleted run $far" -- R runs delete "$far"
# gc: the dry run lists what the local one lists; --apply removes it, keeps the newest
expect 64 "give a policy" -- R gc
diff <("$bin" gc --home "$H" --keep-last 1 --pipeline lab 2>&1) <(R gc --keep-last 1 --pipeline lab 2>&1) \
  || fail "--remote gc printed otherwise than the local command"
expect 0 "would delete run $r2" -- R gc --keep-last 1 --pipeline lab
expect 0 "nothing to remove" -- R gc --older-than 1d
[[ $(count --pipeline lab) == 2 ]] || fail "a remote gc dry run removed runs"
n2=$(find "$H/objects/runs/$r2" -type f | wc -l) b2=$(find "$H/objects/runs/$r2" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
expect 0 "deleted run $r2: $n2 object(s), $b2 B, its rows and scratch directory" -- R gc --keep-last 1 --pipeline lab --apply
[[ $(ids --pipeline lab) == "$r3" ]] || fail "gc --keep-last 1 --apply through the API left $(ids --pipeline lab)"
[[ ! -e $H/objects/runs/$r2 && -f $H/objects/runs/$r3/a/logs/attempt-1.log ]] || fail "the objects after the remote gc"
out=$(R --json gc --keep-last 0 --apply) || fail "--remote --json gc --apply: $out"
python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["applied"] and {r["run"] for r in d["runs"]} == set(sys.argv[2:]), d
assert all(r["deleted"] and r["reason"] is None for r in d["runs"]), d
' "$out" "$r3" "$live" || fail "--remote --json gc --apply: $out"
[[ $(count) == 0 ]] || fail "gc --keep-last 0 --apply through the API left runs"
kill -TERM "$dpid"; wait "$dpid" || fail "the daemon's exit"
dpid=
echo "it_runs_manage: ok"
