#!/usr/bin/env bash
# Runs every test: the cmocka unit tests (build/tests/test_*), then the integration scripts
# (tests/it_*.sh) that start real servers on 127.0.0.1 and stop what they started.
# TF_TEST_FILTER=glob runs only matching tests. Exit status: 0 when nothing failed.
#
# Counting: a cmocka program counts each of its test cases from cmocka's summary lines
# ("[  PASSED  ] N test(s).", "[  SKIPPED ] N test(s)...", "[  FAILED  ] N test(s)..."),
# so a case that calls skip() is counted as skipped, never as passed; an it_*.sh script is
# one test, whatever programs it runs. A program or script that exits 77 (the automake convention) skipped as a whole and counts as one skipped test;
# any other non-zero exit with no failed case in its summary (a crash) counts as one failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export TPUFLOW_BIN="$PWD/$BUILD/tpuflow" TF_BUILD="$BUILD"
filter=${TF_TEST_FILTER:-*}
failed=() skipped_names=()
passed=0 skipped=0 nfailed=0
start=$(date +%s)
out=$(mktemp /tmp/tpuflow-test-out.XXXXXX)
trap 'rm -f "$out"' EXIT

# count NAME RC [cases]: adds the result of one program whose output is in $out; with
# "cases", its cmocka summary lines are counted case by case
count() {
  local name=$1 rc=$2 mode=${3:-} p=0 s=0 f=0
  if ((rc == 77)); then
    skipped=$((skipped + 1))
    skipped_names+=("$name (skipped as a whole)")
    return
  fi
  [[ $mode == cases ]] && read -r p s f < <(awk '
    /^\[  PASSED  \] [0-9]+ test/ { p += $4 }
    /^\[  SKIPPED \] [0-9]+ test/ { s += $4 }
    /^\[  FAILED  \] [0-9]+ test/ { f += $4 }
    END { print p + 0, s + 0, f + 0 }' "$out")
  if ((p + s + f == 0)); then # a script, or not a cmocka program: one test
    if ((rc == 0)); then p=1; else f=1; fi
  elif ((rc != 0 && f == 0)); then
    f=1
  fi
  passed=$((passed + p))
  skipped=$((skipped + s))
  nfailed=$((nfailed + f))
  ((s)) && skipped_names+=("$name ($s case(s))")
  ((f)) && failed+=("$name")
  return 0
}

for t in "$BUILD"/tests/test_*; do
  [[ -x $t ]] || continue
  name=$(basename "$t")
  [[ $name == $filter ]] || continue
  echo "=== $name"
  tmp=$(mktemp -d /tmp/tpuflow-test.XXXXXX)
  (cd "$tmp" && TF_TEST_TMP="$tmp" "$OLDPWD/$t") 2>&1 | tee "$out"
  count "$name" "${PIPESTATUS[0]}" cases
  rm -rf "$tmp"
done

for t in tests/it_*.sh; do
  [[ -f $t ]] || continue
  name=$(basename "$t" .sh)
  [[ $name == $filter ]] || continue
  echo "=== $name"
  bash "$t" 2>&1 | tee "$out"
  count "$name" "${PIPESTATUS[0]}"
done

echo
echo "tests: $passed passed, $skipped skipped, $nfailed failed in $(($(date +%s) - start)) s"
((${#skipped_names[@]})) && printf '  SKIPPED: %s\n' "${skipped_names[@]}"
if ((nfailed)); then
  printf '  FAILED: %s\n' "${failed[@]}"
  exit 1
fi
exit 0
