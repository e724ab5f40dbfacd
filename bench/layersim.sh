#!/usr/bin/env bash
# The SCALE-Sim-compatible layer simulator: the time to simulate whole networks (ResNet-18 and
# AlexNet, SCALE-Sim's own topology files) with tpuflow beside SCALE-Sim v2 itself on the same
# inputs, in the same run, and whether every reported figure is equal. SCALE-Sim is looked for
# at $SCALESIM (default /work/ref/scale-sim-v2: a checkout of scalesim-project/scale-sim-v2, run
# with Debian's python3-numpy/-tqdm/-absl/-pandas); without it the peer is skipped and the
# ratio is reported as not measured. TF_BENCH_LAYERSIM_MODE=USER|CALC (default CALC: SCALE-Sim's
# USER mode grows its trace arrays by concatenation and takes far longer on large networks).
#
# Both sides are timed the same way: CPU time (user + system, from the kernel's accounting of
# the finished process and its children, getrusage) and wall time of the whole process. The
# ratio that judges the target is CPU to CPU: on a machine shared with other work a process's
# wall time grows with the load (a 0.1 s tpuflow run can take 3 s of wall time when 20
# processes want 2 cores), its CPU time hardly; SCALE-Sim is run once per network, tpuflow 5
# times (its least CPU and wall times are kept). TF_BENCH_LAYERSIM_NETS picks the networks.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TPUFLOW_BIN:-build/tpuflow}
SS=${SCALESIM:-/work/ref/scale-sim-v2}
MODE=${TF_BENCH_LAYERSIM_MODE:-CALC}
PY=/usr/bin/python3
NETS=${TF_BENCH_LAYERSIM_NETS:-resnet18 alexnet}
[[ -x $PY ]] || { echo "layersim: $PY is needed to time the runs"; exit 1; }
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
# timed OUT CMD...: runs CMD (stdout and stderr to OUT), prints "WALL CPU" in seconds
timed() {
  $PY -c 'import resource, subprocess, sys, time
t = time.monotonic()
with open(sys.argv[1], "w") as f:
    rc = subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT).returncode
w = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.4f %.4f" % (w, r.ru_utime + r.ru_stime))
sys.exit(rc)' "$@"
}
for net in $NETS; do
  topo=tests/fixtures/scalesim/topologies/$net.csv
  mkdir -p "$tmp/tf_$net"
  tf_wall="" tf_cpu="" ss_cpu=""
  for trial in 1 2 3 4 5; do
    read -r w c < <(timed "$tmp/tf_$net.txt" "$BIN" accel cycles --topology "$topo" \
      --config "$tmp/bench.cfg" --report-dir "$tmp/tf_$net")
    [[ -n ${c:-} ]] || { echo "tpuflow failed on $net: $(tail -3 "$tmp/tf_$net.txt")"; exit 1; }
    if [[ -z $tf_wall ]] || (($(echo "$w < $tf_wall" | bc -l))); then tf_wall=$w; fi
    if [[ -z $tf_cpu ]] || (($(echo "$c < $tf_cpu" | bc -l))); then tf_cpu=$c; fi
  done
  layers=$(head -1 "$tmp/tf_$net.txt" | grep -o '[0-9]* layers')
  total=$(tail -1 "$tmp/tf_$net.txt")
  printf '%s (%s): tpuflow %.4f s CPU, %.4f s wall (least of 5, whole process); %s\n' "$net" \
    "$layers" "$tf_cpu" "$tf_wall" "$total"
  if [[ $peer == 0 ]]; then
    echo "  SCALE-Sim: not run; speed ratio not measured"
    continue
  fi
  read -r ss_wall ss_cpu < <(cd "$SS" && PYTHONPATH=. timed "$tmp/ss_$net.log" $PY scalesim/scale.py \
    -t "$OLDPWD/$topo" -c "$tmp/bench.cfg" -p "$tmp/ss_$net" -i conv)
  [[ -n ${ss_cpu:-} ]] || { echo "SCALE-Sim failed on $net: $(tail -3 "$tmp/ss_$net.log")"; exit 1; }
  same=yes
  for r in COMPUTE_REPORT BANDWIDTH_REPORT DETAILED_ACCESS_REPORT; do
    cmp -s "$tmp/tf_$net/$r.csv" "$tmp/ss_$net/bench/$r.csv" || same="NO ($r differs)"
  done
  printf '  SCALE-Sim %s: %.1f s CPU, %.1f s wall (one run); tpuflow is %.0fx faster in CPU time' \
    "$commit" "$ss_cpu" "$ss_wall" "$(echo "$ss_cpu / $tf_cpu" | bc -l)"
  printf ' (%.0fx wall to wall); all reported figures equal (its 3 report files byte for byte): %s\n' \
    "$(echo "$ss_wall / $tf_wall" | bc -l)" "$same"
done
