#!/usr/bin/env bash
# Integration: step logs are capped per stream and stored once, and `runs logs` streams
# (docs/runs.md, "Logs"). A shell step writes 200 MiB to stdout: the home (database, work
# directory and file:// store together) stays far below that, the log keeps its head, a line
# saying what was cut and its tail, and `runs logs` prints it with a small resident set.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
T=$root/$BUILD/tpuflow
[[ -x $T ]] || { echo "it_logcap: build first (make)"; exit 1; }
dir=$(mktemp -d /tmp/tpuflow-it-logcap.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "it_logcap: FAILED: $*"; exit 1; }
H=$dir/home
cat >"$dir/p.yaml" <<'YAML'
name: chatty
steps:
  - name: talk
    type: shell
    with:
      argv: [sh, -c, 'echo FIRST-LINE; head -c 209715200 /dev/zero | tr "\0" a; echo; echo LAST-LINE']
YAML
TPUFLOW_LOG_MAX=8M "$T" run "$dir/p.yaml" --home "$H" --plain >"$dir/run.log" 2>&1 || fail "run: $(tail -5 "$dir/run.log")"
used=$(du -sk "$H" | cut -f1)
(( used < 40 * 1024 )) || fail "the home holds ${used} KiB after a 200 MiB stdout with an 8 MiB cap"
run=$("$T" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
/usr/bin/time -f "%M" -o "$dir/rss" "$T" runs logs "$run" talk --home "$H" >"$dir/logs.txt" 2>"$dir/logs.err" ||
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
echo "it_logcap: ok (home ${used} KiB, runs logs ${rss} KiB RSS)"
