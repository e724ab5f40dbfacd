#!/usr/bin/env bash
# make demo: runs the demo pipeline end to end on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
exec "$BUILD/tpuflow" run pipelines/fashion-mnist.yaml
