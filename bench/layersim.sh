#!/usr/bin/env bash
# The SCALE-Sim-compatible layer simulator: the time to simulate whole networks (ResNet-18 and
# AlexNet, SCALE-Sim's own topology files) with tpuflow beside SCALE-Sim v2 itself on the same
# inputs, in the same run, and whether every reported figure is equal. SCALE-Sim is looked for
# at $SCALESIM (default /work/ref/scale-sim-v2: a checkout of scalesim-project/scale-sim-v2, run
# with Debian's python3-numpy/-tqdm/-absl/-pandas); without it the peer is skipped and the
# ratio is reported as not measured. TF_BENCH_LAYERSIM_MODE=USER|CALC (default CALC: SCALE-Sim's
# USER mode grows its trace arrays by concatenation and takes far longer on large networks).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-build/tpuflow}
SS=${SCALESIM:-/work/ref/scale-sim-v2}
MODE=${TF_BENCH_LAYERSIM_MODE:-CALC}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s/^InterfaceBandwidth:.*/InterfaceBandwidth: $MODE/; s/^run_name = .*/run_name = bench/" \
  bench/layersim.cfg >"$tmp/bench.cfg"
peer=1
if [[ ! -f $SS/scalesim/scale.py ]]; then
  echo "SCALE-Sim not found at $SS (set SCALESIM=DIR): peer skipped, ratio NOT measured"
  peer=0
elif ! $PY -c 'import numpy, tqdm, absl, pandas' 2>/dev/null; then
  echo "SCALE-Sim's Python modules missing (python3-numpy python3-tqdm python3-absl" \
    "python3-pandas): peer skipped, ratio NOT measured"
  peer=0
fi
commit=$([[ $peer == 1 ]] && git -C "$SS" rev-parse --short HEAD 2>/dev/null || echo "?")
echo "config: 128x128 ws, SRAM 1024/1024/512 kB, $MODE bandwidth$([[ $MODE == USER ]] && echo ' 64 words/cycle')"
for net in resnet18 alexnet; do
  topo=tests/fixtures/scalesim/topologies/$net.csv
  mkdir -p "$tmp/tf_$net"
  tf=""
  for trial in 1 2 3 4 5; do # best of 5: a run is a fraction of a second on a shared machine
    t0=$(date +%s.%N)
    "$BIN" accel cycles --topology "$topo" --config "$tmp/bench.cfg" \
      --report-dir "$tmp/tf_$net" >"$tmp/tf_$net.txt"
    t1=$(date +%s.%N)
    t=$(echo "$t1 - $t0" | bc -l)
    if [[ -z $tf ]] || (($(echo "$t < $tf" | bc -l))); then tf=$t; fi
  done
  layers=$(head -1 "$tmp/tf_$net.txt" | grep -o '[0-9]* layers')
  total=$(tail -1 "$tmp/tf_$net.txt")
  printf '%s (%s): tpuflow %.3f s wall (best of 5, process included); %s\n' "$net" "$layers" "$tf" \
    "$total"
  if [[ $peer == 0 ]]; then
    echo "  SCALE-Sim: not run; speed ratio not measured"
    continue
  fi
  t0=$(date +%s.%N)
  (cd "$SS" && PYTHONPATH=. $PY scalesim/scale.py -t "$OLDPWD/$topo" -c "$tmp/bench.cfg" \
    -p "$tmp/ss_$net" -i conv >"$tmp/ss_$net.log" 2>&1)
  t1=$(date +%s.%N)
  ss=$(echo "$t1 - $t0" | bc -l)
  same=yes
  for r in COMPUTE_REPORT BANDWIDTH_REPORT DETAILED_ACCESS_REPORT; do
    cmp -s "$tmp/tf_$net/$r.csv" "$tmp/ss_$net/bench/$r.csv" || same="NO ($r differs)"
  done
  printf '  SCALE-Sim %s: %.1f s wall (one run); tpuflow is %.0fx faster (wall to wall); all reported' \
    "$commit" "$ss" "$(echo "$ss / $tf" | bc -l)"
  printf ' figures equal (its 3 report files byte for byte): %s\n' "$same"
done
