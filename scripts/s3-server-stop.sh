#!/usr/bin/env bash
# Stops what scripts/s3-server-start.sh DIR started, by the pid files it wrote (nothing else).
set -uo pipefail
B=${1:?usage: $0 DIR}
"$(dirname "$0")"/stop-pidfiles.sh 5 "$B"/run/{proxy,object,container,account,memcached}.pid
