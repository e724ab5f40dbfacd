#!/usr/bin/env bash
# Scheduler simulation on a 4096-chip v4 pod (v4:16x16x16): 10,000 and 100,000 seeded jobs,
# EASY backfill against FIFO without backfill on the same workload in the same run. Targets
# (docs/benchmarks.md): >= 10,000 placement decisions per CPU second with both policies at
# 100,000 jobs, and the CPU time per decision at 100,000 jobs within 1.2x of that at 10,000
# (linear in the queue). Kueue's own test admits ~43 workloads/s. TF_BENCH_SCHED_JOBS=10000
# skips the 100,000-job run (about half a minute of CPU per policy).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-build/tpuflow}
sizes=${TF_BENCH_SCHED_JOBS:-"10000 100000"}
cmd=("$BIN" sched simulate --pool v4:16x16x16 --jobs 10000 --seed 1 --policy backfill)
echo "\$ tpuflow ${cmd[*]:1}"
"${cmd[@]}"
docs=()
for n in $sizes; do
	echo "\$ tpuflow sched simulate --pool v4:16x16x16 --jobs $n --seed 1 --policy backfill --json"
	docs+=("$("$BIN" sched simulate --pool v4:16x16x16 --jobs "$n" --seed 1 --policy backfill --json)")
done
python3 - "${docs[@]}" <<'PY'
import json, sys
runs = [json.loads(a) for a in sys.argv[1:]]
for d in runs:
    r, b = d["result"], d["baseline"]
    print(f"{d['jobs']:,} jobs: decisions per CPU second: backfill {r['decisions_per_second']:,.0f}, "
          f"fifo {b['decisions_per_second']:,.0f}; target 10,000 -> "
          f"{'ok' if min(r['decisions_per_second'], b['decisions_per_second']) >= 10000 else 'BELOW TARGET'}; "
          f"x{r['decisions_per_second'] / 43:,.0f} Kueue's ~43 admissions/s")
    print(f"  utilization: backfill {r['utilization']:.3f} vs fifo {b['utilization']:.3f} "
          f"(x{d['utilization_vs_fifo']:.3f}); makespan x{r['makespan_seconds'] / b['makespan_seconds']:.3f}; "
          f"trace digests {r['trace_digest']} / {b['trace_digest']}")
if len(runs) == 2:
    small, big = runs
    for key, name in (("result", "backfill"), ("baseline", "fifo")):
        us = [1e6 * d[key]["scheduler_seconds"] / d[key]["decisions"] for d in runs]
        ratio = us[1] / us[0]
        print(f"{name}: {us[0]:.1f} us per decision at {small['jobs']:,} jobs, {us[1]:.1f} at "
              f"{big['jobs']:,}: x{ratio:.2f} of linear; target 1.2 -> "
              f"{'ok' if ratio <= 1.2 else 'ABOVE TARGET'}")
PY
