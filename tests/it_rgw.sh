#!/usr/bin/env bash
# Integration: tests/it_s3.sh against Ceph's RADOS Gateway on a one-node cluster
# (scripts/rgw-start.sh) instead of Swift: the same S3 client, checkpoints, faults and CLI
# checks against a second real server. Skipped (77) when the Ceph packages (`scripts/deps.sh
# test`, which `make test` runs) are not installed.
TF_S3_IT_SERVER=rgw exec bash "$(dirname "$0")/it_s3.sh"
