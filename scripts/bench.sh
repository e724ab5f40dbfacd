#!/usr/bin/env bash
# make bench: every benchmark program (build/bench/*) and script (bench/*.sh), each printing
# its figures next to a peer measured in the same run. TF_BENCH_FILTER=glob picks some.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export TPUFLOW_BIN="$PWD/$BUILD/tpuflow" TF_BUILD="$BUILD"
filter=${TF_BENCH_FILTER:-*}
rc=0
for b in "$BUILD"/bench/* bench/*.sh; do
  [[ -f $b && ( -x $b || $b == *.sh ) && $b != *.d ]] || continue
  name=$(basename "$b" .sh)
  [[ $name == $filter ]] || continue
  echo "=== bench: $name"
  if [[ $b == *.sh ]]; then bash "$b" || rc=1; else "$b" || rc=1; fi
done
exit $rc
