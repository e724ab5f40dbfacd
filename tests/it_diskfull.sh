#!/usr/bin/env bash
# Integration: a full disk, with real file systems (docs/storage.md, "A full disk").
#  1. a step writing to a file:// store on a full file system fails as infra (so
#     `on: [infra]` retries it), and the log of a step that ran meanwhile stays local;
#  2. once space is freed, `runs retry` uploads that log (its attempt gets a log key and
#     `runs logs` shows it);
#  3. a state home on a full file system: `runs list` says the disk is full.
# Needs root (mount -t tmpfs); otherwise skipped (exit 77). Unmounts only what it mounted.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
[[ -x $bin ]] || { echo "it_diskfull: build first (make)"; exit 1; }
if [[ $(id -u) != 0 ]]; then echo "it_diskfull: skipped (needs root to mount a tmpfs)"; exit 77; fi
dir=$(mktemp -d /tmp/tpuflow-it-diskfull.XXXXXX)
mnt=$dir/mnt
mkdir -p "$mnt"
mount -t tmpfs -o size=4m tmpfs "$mnt" || { echo "it_diskfull: skipped (cannot mount a tmpfs)"; rm -rf "$dir"; exit 77; }
cleanup() { umount "$mnt" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "it_diskfull: FAILED: $*"; exit 1; }
fill() { dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null; sync; }
H=$dir/home
mkdir -p "$mnt/store"
cat >"$dir/p.yaml" <<YAML
name: diskfull
storage: file://$mnt/store
steps:
  - name: talk
    type: shell
    with:
      argv: [sh, -c, 'echo "said by attempt \$TPUFLOW_ATTEMPT"']
  - name: prep
    type: data_prep
    needs: talk
    retries: {limit: 1, backoff: 0.1s, on: [infra]}
    with: {source: csv, path: $root/pipelines/data/example.csv, csv_label: label, shards: 2}
YAML

# ---- 1: the store's file system is full
fill
"$bin" run "$dir/p.yaml" --home "$H" --plain >"$dir/run1.log" 2>&1
rc=$?
[[ $rc == 1 ]] || fail "the run on a full store exited $rc, expected 1: $(cat "$dir/run1.log")"
run=$("$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$bin" runs show "$run" --home "$H" --json >"$dir/show1.json" || fail "runs show"
python3 - "$dir/show1.json" <<'PY' || fail "after the full-disk run: $(cat "$dir/show1.json")"
import json, sys
d = json.load(open(sys.argv[1]))
steps = {s["name"]: s for s in d["steps"]}
prep = steps["prep"]["attempts_detail"]
assert [a["failure_class"] for a in prep] == ["infra", "infra"], prep
assert "disk is full" in prep[0]["error"], prep[0]
talk = steps["talk"]["attempts_detail"]
assert steps["talk"]["state"] == "succeeded", steps["talk"]
assert talk[0]["log"] is None, talk
PY

# ---- 2: space is back; the retried run uploads the log that stayed local
rm -f "$mnt/fill"
"$bin" runs retry "$run" --home "$H" --plain >"$dir/run2.log" 2>&1 || fail "runs retry after freeing space: $(cat "$dir/run2.log")"
"$bin" runs show "$run" --home "$H" --json >"$dir/show2.json"
python3 - "$dir/show2.json" <<'PY' || fail "after the retry: $(cat "$dir/show2.json")"
import json, sys
d = json.load(open(sys.argv[1]))
steps = {s["name"]: s for s in d["steps"]}
assert d["state"] == "succeeded", d["state"]
talk = steps["talk"]["attempts_detail"]
assert talk[0]["log"] == "runs/%s/talk/logs/attempt-1.log" % d["id"], talk
PY
"$bin" runs logs "$run" talk --home "$H" | grep -q "said by attempt 1" || fail "runs logs does not show the late-uploaded log"

# ---- 3: the state home itself on a full file system, its WAL gone (a copied database)
python3 - "$H/tpuflow.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
mkdir -p "$mnt/home"
cp "$H/tpuflow.db" "$mnt/home/tpuflow.db"
fill
out=$("$bin" runs list --home "$mnt/home" 2>&1)
rc=$?
[[ $rc != 0 ]] || fail "runs list on a full disk exited 0: $out"
grep -q "the disk is full" <<<"$out" || fail "runs list on a full disk did not say so: $out"
grep -q "disk I/O error" <<<"$out" && fail "runs list still says 'disk I/O error': $out"
echo "it_diskfull: ok"
