#!/usr/bin/env bash
# Integration: step logs are capped per stream and stored once, and `runs logs` streams
# (docs/runs.md, "Logs"). A shell step writes 200 MiB to stdout: the home (database, work
# directory and file:// store together) stays far below that, the log keeps its head, a line
# saying what was cut and its tail, and `runs logs` prints it with a small resident set.
. "$(dirname "$0")/lib.sh" it_logcap logcap
cat >"$dir/p.yaml" <<'YAML'
name: chatty
steps:
  - name: talk
    type: shell
    with:
      argv: [sh, -c, 'echo FIRST-LINE; head -c 209715200 /dev/zero | tr "\0" a; echo; echo LAST-LINE']
YAML
TPUFLOW_LOG_MAX=8M "$bin" run "$dir/p.yaml" --home "$H" --plain >"$dir/run.log" 2>&1 || fail "run: $(tail -5 "$dir/run.log")"
used=$(du -sk "$H" | cut -f1)
(( used < 40 * 1024 )) || fail "the home holds ${used} KiB after a 200 MiB stdout with an 8 MiB cap"
run=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
/usr/bin/time -f "%M" -o "$dir/rss" "$bin" runs logs "$run" talk --home "$H" >"$dir/logs.txt" 2>"$dir/logs.err" ||
  fail "runs logs: $(cat "$dir/logs.err")"
rss=$(tail -1 "$dir/rss")
(( rss < 32 * 1024 )) || fail "runs logs peaked at ${rss} KiB for an 8 MiB log"
grep -q "^FIRST-LINE$" "$dir/logs.txt" || fail "the log lost its head"
grep -q "^LAST-LINE$" "$dir/logs.txt" || fail "the log lost its tail"
grep -q "bytes of stdout cut here (TPUFLOW_LOG_MAX)" "$dir/logs.txt" || fail "the log does not say what was cut"
size=$(stat -c %s "$dir/logs.txt")
(( size < 9 * 1024 * 1024 )) || fail "runs logs printed $size bytes for an 8 MiB cap"
# one copy: the store's; no raw streams or attempt log left in the work directory
left=$(find "$H/work" -type f -size +0 | wc -l)
[[ $left == 0 ]] || fail "copies left in the work directory: $(find "$H/work" -type f -size +0)"
# --json streams each log into the document too
/usr/bin/time -f "%M" -o "$dir/rss" "$bin" runs logs "$run" talk --home "$H" --json >"$dir/logs.json" 2>"$dir/logs.err" ||
  fail "runs logs --json: $(cat "$dir/logs.err")"
jrss=$(tail -1 "$dir/rss")
(( jrss < 32 * 1024 )) || fail "runs logs --json peaked at ${jrss} KiB for an 8 MiB log"
python3 -c '
import json,sys
d = json.load(open(sys.argv[1]))
t = d["logs"][0]["text"]
assert t.startswith("==> stdout <==\nFIRST-LINE\n") and "LAST-LINE" in t, t[:80]
' "$dir/logs.json" || fail "runs logs --json is not the log as JSON"
# the cap as a pipeline key (defaults.log_max, a step's log_max), over the environment's
cat >"$dir/k.yaml" <<'YAML'
name: keyed
defaults: {log_max: 16K}
steps:
  - name: talk
    type: shell
    with: {argv: [sh, -c, 'echo FIRST; head -c 1048576 /dev/zero | tr "\0" b; echo; echo LAST']}
YAML
TPUFLOW_LOG_MAX=8M "$bin" run "$dir/k.yaml" --home "$H" --plain >"$dir/run.log" 2>&1 || fail "run k.yaml: $(tail -5 "$dir/run.log")"
"$bin" runs logs "$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')" talk --home "$H" >"$dir/k.txt"
grep -q "bytes of stdout cut here (log_max)" "$dir/k.txt" || fail "log_max did not cap the log: $(head -c 300 "$dir/k.txt")"
(( $(stat -c %s "$dir/k.txt") < 40 * 1024 )) || fail "log_max 16K left $(stat -c %s "$dir/k.txt") bytes"
printf 'name: bad\nsteps:\n  - {name: a, type: shell, log_max: 12, with: {argv: [/bin/true]}}\n' >"$dir/bad.yaml"
out=$("$bin" validate "$dir/bad.yaml" 2>&1); rc=$?
[[ $rc == 65 ]] && grep -q "bad.yaml:3:37: error: 'log_max': bad size '12'" <<<"$out" || fail "log_max 12: $rc $out"
echo "it_logcap: ok (home ${used} KiB, runs logs ${rss} KiB RSS, --json ${jrss} KiB)"
