#!/usr/bin/env bash
# Keeps the include arrows pointing one way. Folders in layer order; a file may include
# project headers from its own folder or an earlier one only:
#   common -> accel -> storage -> ml -> scheduler -> executors -> orchestrator -> web -> cli
# plus two sharper rules: accel/ and scheduler/ stay pure (no storage, no I/O layers), and
# only orchestrator/store.c includes sqlite3.h.
set -uo pipefail
cd "$(dirname "$0")/.."
layers=(common accel storage ml scheduler executors orchestrator web cli)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
allowed_extra_accel="common accel"
allowed_extra_sched="common accel scheduler"
bad=0
for dir in "${layers[@]}"; do
  for f in $dir/*.[ch]; do
    [[ -f $f ]] || continue
    while IFS= read -r inc; do
      dep=${inc%%/*}
      [[ -n ${rank[$dep]+x} ]] || continue
      if (( ${rank[$dep]} > ${rank[$dir]} )); then
        echo "$f: includes \"$inc\": $dir/ may not depend on $dep/ (later layer)"; bad=1
      fi
      if [[ $dir == accel && " $allowed_extra_accel " != *" $dep "* ]] ||
         [[ $dir == scheduler && " $allowed_extra_sched " != *" $dep "* ]]; then
        echo "$f: includes \"$inc\": $dir/ must stay pure (common/ and accel/ only)"; bad=1
      fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
  done
done
while IFS= read -r f; do
  [[ $f == orchestrator/store.c ]] || { echo "$f: includes sqlite3.h (only orchestrator/store.c may)"; bad=1; }
done < <(grep -l '#include <sqlite3.h>' */*.c */*.h 2>/dev/null)
((bad)) && exit 1
echo "check-deps: ok (${layers[*]})"
