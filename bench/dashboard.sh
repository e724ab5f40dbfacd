#!/usr/bin/env bash
# bench/dashboard.sh — the dashboard in Chromium (docs/dashboard.md, docs/benchmarks.md):
#  - the runs page's first contentful paint on a home with 10,000 runs (goal <= 1 s), beside
#    the same page on a home with a few runs;
#  - the run page of a 1,000-step DAG, time to interactive (goal <= 2 s), beside a 5-step run;
#  - the bundle's size, gzip -9 (goal <= 150 KB).
#  - the runs page's event stream (GET /api/v1/events?after=latest): what it gets in its first
#    3 s, beside the same stream without `after` (every event since the first replayed).
# The 10,000 runs are one real run of a 3-step shell pipeline, copied row by row (runs, steps,
# attempts, events) under new ids and times; the 1,000-step and 5-step runs are real.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${TF_BUILD:-build}
bin=${TPUFLOW_BIN:-$root/$BUILD/tpuflow}
if ! command -v node >/dev/null || [[ ! -x /usr/bin/chromium ]] ||
  [[ ! -f node_modules/playwright-core/package.json ]]; then
  echo "dashboard: node, chromium or playwright-core missing (make deps); skipped"
  exit 0
fi
N=${TF_BENCH_DASH_RUNS:-10000}
dir=$(mktemp -d /tmp/tpuflow-bench-dashboard.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT

js=$(gzip -9c "$BUILD/ui/ui/app.js" | wc -c)
css=$(gzip -9c "$BUILD/ui/ui/app.css" | wc -c)
page=$(gzip -9c "$BUILD/ui/index.html" | wc -c)
echo "bundle, gzip -9: script $js B, style sheet $css B, page $page B, $(((js + css + page) / 1024)) KiB in all (goal <= 150 KB)"

cat >"$dir/three.yaml" <<'YAML'
name: nightly
steps:
  - {name: fetch, type: shell, with: {argv: ['true']}}
  - {name: build, type: shell, needs: [fetch], with: {argv: ['true']}}
  - {name: check, type: shell, needs: [build], with: {argv: ['true']}}
YAML
cat >"$dir/five.yaml" <<'YAML'
name: five
steps:
  - {name: a, type: shell, with: {argv: ['true']}}
  - {name: b, type: shell, needs: [a], with: {argv: ['true']}}
  - {name: c, type: shell, needs: [a], with: {argv: ['true']}}
  - {name: d, type: shell, needs: [b, c], with: {argv: ['true']}}
  - {name: e, type: shell, needs: [d], with: {argv: ['true']}}
YAML
python3 - "$dir/wide.yaml" <<'PY'
import sys
lines = ["name: wide", "steps:", "  - {name: root, type: shell, with: {argv: ['true']}}"]
lines += ["  - {name: s%03d, type: shell, needs: [root], with: {argv: ['true']}}" % i for i in range(998)]
lines += ["  - {name: join, type: shell, needs: [%s], with: {argv: ['true']}}" % ", ".join("s%03d" % i for i in range(998))]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

for h in big small; do
  "$bin" run "$dir/three.yaml" --home "$dir/$h" --embedded --plain >/dev/null || { echo "dashboard: seeding run failed"; exit 1; }
done
"$bin" run "$dir/five.yaml" --home "$dir/big" --embedded --plain >/dev/null &&
  "$bin" run "$dir/wide.yaml" --home "$dir/big" --embedded --plain >/dev/null || { echo "dashboard: a run failed"; exit 1; }
python3 - "$dir/big/tpuflow.db" "$N" <<'PY'
import sqlite3, sys, random
db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2])
src = db.execute("SELECT id FROM runs WHERE pipeline='nightly'").fetchone()[0]
def copy(table, key, new, shift):
    cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    rows = db.execute(f"SELECT {','.join(cols)} FROM {table} WHERE {key}=?", (src,)).fetchall()
    for r in rows:
        r = dict(zip(cols, r))
        r[key] = new
        for c in ("created_at", "started_at", "finished_at", "at"):
            if r.get(c) is not None:
                r[c] -= shift
        db.execute(f"INSERT INTO {table}({','.join(cols)}) VALUES({','.join('?' * len(cols))})",
                   [r[c] for c in cols])
random.seed(1)
with db:
    for i in range(n - 1):
        shift = (i + 1) * 60.0
        new = "20260101-%06d-%06x" % (i, random.getrandbits(24))
        copy("runs", "id", new, shift)
        copy("steps", "run_id", new, shift)
        copy("attempts", "run_id", new, shift)
        copy("events", "run_id", new, shift)  # event_seq follows (its trigger)
print("dashboard: home with %d runs, %d events" % (db.execute("SELECT count(*) FROM runs").fetchone()[0],
      db.execute("SELECT count(*) FROM event_seq").fetchone()[0]))
PY
start() { # HOME (in this shell, so clean-up knows the pid)
  "$bin" daemon --home "$1" --listen 127.0.0.1:0 --no-auth >>"$dir/d.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do [[ -s $1/daemon.json ]] && break; sleep 0.05; done
}
url() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$1/daemon.json"; }
start "$dir/big" && start "$dir/small"
ub=$(url "$dir/big") && us=$(url "$dir/small") || { echo "dashboard: a daemon did not start"; exit 1; }
id() {
  python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT id FROM runs WHERE pipeline=?", (sys.argv[2],)).fetchone()[0])' "$dir/big/tpuflow.db" "$1"; }
node bench/dashboard.mjs "$ub" "$us" "$(id wide)" "$(id five)"
