#!/usr/bin/env bash
# Rewrites the step reference of docs/pipeline.md (between its BEGIN/END markers) with what
# `tpuflow kinds --markdown` prints from the step-kind table; tests/test_cli.c checks they match.
#   BUILD (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
gen=$(mktemp)
trap 'rm -f "$gen"' EXIT
"${BUILD:-build}/tpuflow" kinds --markdown >"$gen"
awk -v gen="$gen" '
  /^<!-- BEGIN tpuflow kinds --markdown/ { print; while ((getline line < gen) > 0) print line; skip = 1; next }
  /^<!-- END tpuflow kinds/ { skip = 0 }
  !skip' docs/pipeline.md >docs/pipeline.md.new
mv docs/pipeline.md.new docs/pipeline.md
