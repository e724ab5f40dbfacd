#!/usr/bin/env bash
# Installs the Debian packages a purpose needs, and only those that are missing.
#   scripts/deps.sh build   compiler and -dev libraries (make, make demo)
#   scripts/deps.sh test    what the test suite needs beyond the build (real servers, tools)
#   scripts/deps.sh bench   peers for benchmarks (OpenBLAS, curl, hyperfine, Snakemake)
#   scripts/deps.sh docs    tools that make the README's screenshots small (pngquant, optipng)
#   scripts/deps.sh npm     Node.js and npm; scripts/deps.sh npm-ci the pinned packages of
#                           package-lock.json (npm ci, only when the lockfile changed)
# Idempotent; says what it installs; needs root (or sudo) only when something is missing.
set -euo pipefail

build=(gcc make pkg-config libsqlite3-dev libcurl4-openssl-dev libyaml-dev libmicrohttpd-dev
       libcmocka-dev libjansson-dev libssl-dev zlib1g-dev dataset-fashion-mnist)
test=(protobuf-compiler curl python3 swift swift-proxy swift-object swift-container
      swift-account python3-swift memcached)
test+=(slurm-wlm munge)  # tests/it_slurm.sh, bench/slurm.sh: a one-node Slurm cluster
bench=(libopenblas-dev curl hyperfine snakemake)
bench+=(bc python3-numpy python3-tqdm python3-absl python3-pandas)  # SCALE-Sim v2, layersim's peer
test+=(prometheus)  # tests/test_web.c: promtool check metrics, a real Prometheus scraping /metrics
bench+=(wrk)  # bench/api.c: the REST API and the HTTP floor under wrk
bench+=(python3-torch python3-numpy)  # training peers of bench/train.sh (bench/train_py_peers.py)
test+=(radosgw ceph-mon ceph-osd ceph-mgr)  # tests/it_rgw.sh, bench/s3.sh: a one-node Ceph with its S3 gateway (scripts/rgw-start.sh)
bench+=(radosgw ceph-mon ceph-osd ceph-mgr)
test+=(chromium)  # tests/it_dashboard.sh: the dashboard in a real browser (playwright-core drives /usr/bin/chromium)
test+=(prometheus-alertmanager)  # tests/it_alerts.sh: alerts posted to a real Alertmanager
test+=(openssl)  # tests/it_daemon_tls.sh: a certificate for the daemon's HTTPS
docs=(pngquant optipng)  # scripts/readme-shots.sh: the README's dashboard screenshots, made small

case "${1:-build}" in
  build) want=("${build[@]}") ;;
  test)  want=("${test[@]}") ;;
  bench) want=("${bench[@]}") ;;
  docs)  want=("${docs[@]}") ;;
  npm)
    # esbuild (the dashboard's bundle), the API contract tests' validators, playwright-core
    # (package.json, pinned by package-lock.json).
    command -v npm >/dev/null && exec "$0" npm-ci
    want=(nodejs npm) ;;
  npm-ci)
    cd "$(dirname "$0")/.."
    [[ node_modules/.package-lock.json -nt package-lock.json ]] && exit 0
    echo "deps: npm ci (package-lock.json)"
    npm ci --no-audit --no-fund --loglevel=error >/tmp/tpuflow-npm.log 2>&1 ||
      { tail -20 /tmp/tpuflow-npm.log >&2; echo "deps: npm ci failed (log: /tmp/tpuflow-npm.log)" >&2; exit 69; }
    exit 0 ;;
  *) echo "usage: $0 build|test|bench|docs|npm|npm-ci" >&2; exit 64 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]})) || exit 0

echo "deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "deps: need root to install: ${missing[*]}" >&2; exit 69; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/tpuflow-apt.log 2>&1; then
  $sudo apt-get update >/dev/null 2>&1 || true
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/tpuflow-apt.log 2>&1 ||
    { tail -20 /tmp/tpuflow-apt.log >&2; echo "deps: apt-get failed (log: /tmp/tpuflow-apt.log)" >&2; exit 69; }
fi
echo "deps: installed ${#missing[@]} package(s)"
