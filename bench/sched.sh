#!/usr/bin/env bash
# Scheduler simulation: 10,000 seeded jobs on a 4096-chip v4 pod (v4:16x16x16), EASY backfill
# against FIFO without backfill on the same workload in the same run. Target (docs/benchmarks.md):
# >= 10,000 placement decisions per second; Kueue's own test admits ~43 workloads/s.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-build/tpuflow}
cmd=("$BIN" sched simulate --pool v4:16x16x16 --jobs 10000 --seed 1 --policy backfill)
echo "\$ tpuflow ${cmd[*]:1}"
"${cmd[@]}"
json=$("${cmd[@]}" --json)
python3 - "$json" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
r, b = d["result"], d["baseline"]
dps = d["decisions_per_second"]
print(f"decisions/s: backfill {dps:,.0f}, fifo {b['decisions_per_second']:,.0f}; "
      f"target 10,000 -> {'ok' if dps >= 10000 else 'BELOW TARGET'}; "
      f"x{dps / 43:,.0f} Kueue's ~43 admissions/s")
print(f"utilization: backfill {r['utilization']:.3f} vs fifo {b['utilization']:.3f} "
      f"(x{d['utilization_vs_fifo']:.3f}); makespan x{r['makespan_seconds'] / b['makespan_seconds']:.3f}")
PY
