#!/usr/bin/env bash
# `tpuflow runs list --limit 50` against the number of runs in the home: a 5-step pipeline is
# run for real once, then its rows (run, steps, attempts, events) are copied with new ids and
# creation times, earlier and earlier, into homes of 10, 100 and 10,000 runs (about 330,000
# rows in the largest); hyperfine times the command on each home, interleaved in rounds.
# Target (issue 19): on 10,000 runs <= 1.2x its time on 10 (and on 100) runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-$PWD/build/tpuflow}
ROUNDS=${TF_BENCH_REPS:-3}
command -v hyperfine >/dev/null || { echo "runs_list: hyperfine is not installed (make bench installs it)"; exit 0; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpuflow-bench-runs.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cat > "$dir/five.yaml" <<'YAML'
name: five
steps:
  - {name: a, type: shell, with: {argv: ["true"]}}
  - {name: b, type: shell, with: {argv: ["true"]}, needs: [a]}
  - {name: c, type: shell, with: {argv: ["true"]}, needs: [a]}
  - {name: d, type: shell, with: {argv: ["true"]}, needs: [b, c]}
  - {name: e, type: shell, with: {argv: ["true"]}, needs: [d]}
YAML
for n in 10 100 10000; do
  "$BIN" --home "$dir/h$n" run "$dir/five.yaml" --plain >/dev/null
  /usr/bin/python3 - "$dir/h$n/tpuflow.db" "$n" <<'PY'
import sqlite3, sys
db, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
(src, t0), = c.execute("SELECT id, created_at FROM runs").fetchall()
def cols(t):
    return [r[1] for r in c.execute(f"PRAGMA table_info({t})")]
def copy(t, new_id, shift):
    cs = cols(t)
    sel = ", ".join("?" if x == ("id" if t == "runs" else "run_id") else
                    (f"{x} - ?" if x in ("created_at", "started_at", "finished_at", "at",
                                         "heartbeat_at") else x) for x in cs)
    args = []
    for x in cs:
        if x == ("id" if t == "runs" else "run_id"):
            args.append(new_id)
        elif x in ("created_at", "started_at", "finished_at", "at", "heartbeat_at"):
            args.append(shift)
    key = "id" if t == "runs" else "run_id"
    c.execute(f"INSERT INTO {t} ({', '.join(cs)}) SELECT {sel} FROM {t} WHERE {key} = ?",
              args + [src])
with c:
    for i in range(1, n):
        new_id = f"{src[:15]}-{i:06x}"
        for t in ("runs", "steps", "attempts", "events"):
            copy(t, new_id, 60.0 * i)
print(f"  home of {c.execute('SELECT count(*) FROM runs').fetchone()[0]} runs, "
      f"{c.execute('SELECT count(*) FROM steps').fetchone()[0]} steps, "
      f"{c.execute('SELECT count(*) FROM events').fetchone()[0]} events")
PY
done
# rounds of 30 runs of each command, so drift hits all alike; wall medians and CPU means (on a
# loaded machine the wall time is mostly waiting for a core)
for r in $(seq "$ROUNDS"); do
  hyperfine -N --warmup 3 --runs 30 --export-json "$dir/r$r.json" \
    -n 10 "$BIN --home $dir/h10 runs list --limit 50" \
    -n 100 "$BIN --home $dir/h100 runs list --limit 50" \
    -n 10000 "$BIN --home $dir/h10000 runs list --limit 50" >/dev/null
done
/usr/bin/python3 - "$dir" "$ROUNDS" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
wall, cpu = {}, {}
for r in range(1, rounds + 1):
    for res in json.load(open(f"{d}/r{r}.json"))["results"]:
        wall.setdefault(res["command"], []).append(statistics.median(res["times"]))
        cpu.setdefault(res["command"], []).append(res["user"] + res["system"])
def line(name, v):
    return f"{name} median {statistics.median(v)*1e3:.2f} ms ({min(v)*1e3:.2f}-{max(v)*1e3:.2f})"
for k in ("10", "100", "10000"):
    print(f"  runs list --limit 50, {k:>5} runs: " + line("wall", wall[k]) + "; " +
          line("CPU (user+system, mean)", cpu[k]))
for base in ("10", "100"):
    w = [a / b for a, b in zip(wall["10000"], wall[base])]
    c = [a / b for a, b in zip(cpu["10000"], cpu[base])]
    print(f"  10,000 runs / {base} runs: wall {statistics.median(w):.2f}x ({min(w):.2f}-{max(w):.2f}), "
          f"CPU {statistics.median(c):.2f}x ({min(c):.2f}-{max(c):.2f}); target <= 1.2x")
PY
