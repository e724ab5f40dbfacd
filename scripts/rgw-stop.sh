#!/usr/bin/env bash
# Stops what scripts/rgw-start.sh DIR started, by the pid files it wrote (nothing else), and
# frees the OSD's store (its memory, or bluestore's sparse file).
set -uo pipefail
B=${1:?usage: $0 DIR}
"$(dirname "$0")"/stop-pidfiles.sh 10 "$B"/run/{rgw,osd,mgr,mon}.pid
rm -f "$B/osd/block"
exit 0
