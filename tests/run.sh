#!/usr/bin/env bash
# Runs every test: the cmocka unit tests (build/tests/test_*), then the integration scripts
# (tests/it_*.sh) that start real servers on 127.0.0.1 and stop what they started.
# TF_TEST_FILTER=glob runs only matching tests. Exit status: 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export TPUFLOW_BIN="$PWD/$BUILD/tpuflow" TF_BUILD="$BUILD"
filter=${TF_TEST_FILTER:-*}
failed=()
passed=0
start=$(date +%s)

for t in "$BUILD"/tests/test_*; do
  [[ -x $t ]] || continue
  name=$(basename "$t")
  [[ $name == $filter ]] || continue
  echo "=== $name"
  tmp=$(mktemp -d /tmp/tpuflow-test.XXXXXX)
  if (cd "$tmp" && TF_TEST_TMP="$tmp" "$OLDPWD/$t"); then passed=$((passed + 1)); else failed+=("$name"); fi
  rm -rf "$tmp"
done

for t in tests/it_*.sh; do
  [[ -f $t ]] || continue
  name=$(basename "$t" .sh)
  [[ $name == $filter ]] || continue
  echo "=== $name"
  if bash "$t"; then passed=$((passed + 1)); else failed+=("$name"); fi
done

echo
echo "tests: $passed passed, ${#failed[@]} failed in $(( $(date +%s) - start )) s"
if ((${#failed[@]})); then
  printf '  FAILED: %s\n' "${failed[@]}"
  exit 1
fi
