#!/usr/bin/env bash
# make soak: the kill -9 drill (docs/runs.md). Each round runs a small five-stage
# pipeline, kills `tpuflow` with SIGKILL at a random moment, resumes, kills the resume too
# (sometimes), and finally resumes to the end. Then it checks that the run succeeded, no step
# succeeded twice, exactly one model version exists, PRAGMA integrity_check is ok, and a train
# attempt that followed a killed one restarted at most one checkpoint interval back.
#   SOAK_ROUNDS (default 20), SOAK_SEED (default: time), BUILD (default build)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/${BUILD:-build}/tpuflow"
ROUNDS=${SOAK_ROUNDS:-20}
RANDOM=${SOAK_SEED:-$(date +%s)}
CKPT_EVERY=20
work=$(mktemp -d /tmp/tpuflow-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT

cat > "$work/soak.yaml" <<YAML
name: soak
steps:
  - name: prep
    type: data_prep
    with: {source: fashion-mnist, shards: 4, seed: 1, limit_train: 60000, limit_test: 2000}
  - name: train
    type: train
    needs: [prep]
    accelerator: v4-8
    with: {dataset: '\${steps.prep.outputs.dataset}', hidden: [256, 128], epochs: 6, batch: 256,
           optimizer: sgd, lr: 0.1, momentum: 0.9, seed: 1, checkpoint_every: $CKPT_EVERY}
  - name: evaluate
    type: evaluate
    needs: [train]
    with: {model: '\${steps.train.outputs.bundle}', dataset: '\${steps.prep.outputs.dataset}'}
  - name: register
    type: register
    needs: [evaluate]
    with: {model_name: soak, bundle: '\${steps.train.outputs.bundle}', metrics_from: evaluate}
  - name: deploy
    type: deploy
    needs: [register]
    with: {model_name: soak, version: '\${steps.register.outputs.version}', alias: production}
YAML

# Runs "$@" and SIGKILLs it after a random 0.1-8 s; returns 0 if it was killed.
run_and_kill() {
  "$@" >/dev/null 2>&1 &
  local pid=$! ms=$((100 + RANDOM % 7900))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 0; fi
  wait "$pid" 2>/dev/null; return 1
}

failed=0 kills=0
for ((i = 1; i <= ROUNDS; i++)); do
  home="$work/home$i"
  run_and_kill "$BIN" --home "$home" run "$work/soak.yaml" && kills=$((kills + 1))
  run=$("$BIN" --home "$home" runs list --json 2>/dev/null | /usr/bin/python3 -c \
        'import json,sys; r=json.load(sys.stdin); print(r[0]["id"] if r else "")')
  if [[ -z $run ]]; then echo "round $i: killed before the run was recorded (nothing to resume)"; continue; fi
  if ((RANDOM % 2)); then run_and_kill "$BIN" --home "$home" runs resume "$run" && kills=$((kills + 1)); fi
  "$BIN" --home "$home" runs resume "$run" >/dev/null 2>"$work/resume.err"
  "$BIN" --home "$home" runs show "$run" --json >"$work/show.json" 2>/dev/null
  if ! /usr/bin/python3 - "$work/show.json" "$home" "$run" "$CKPT_EVERY" "$i" <<'PY'
import json, sqlite3, sys, re, os
show, home, run, every, rnd = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
bad = []
r = json.load(open(show))
if r["state"] != "succeeded":
    bad.append(f"run state {r['state']}: {r.get('error')}")
for s in r["steps"]:
    ok = [a for a in s["attempts_detail"] if a["state"] == "succeeded"]
    if s["state"] == "succeeded" and not s.get("cache_hit") and len(ok) != 1:
        bad.append(f"step {s['name']} succeeded {len(ok)} times")
db = sqlite3.connect(os.path.join(home, "tpuflow.db"))
if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
    bad.append("integrity_check failed")
n = db.execute("SELECT count(*) FROM model_versions").fetchone()[0]
if n != 1:
    bad.append(f"{n} model versions")
# A train attempt after a lost one must resume from the newest checkpoint the lost one wrote.
# A killed attempt's log stays in the local work directory (it is uploaded when an attempt
# ends); a finished one is in the object store.
def log_of(n):
    for p in (os.path.join(home, "objects", "runs", run, "train", "logs", f"attempt-{n}.log"),
              os.path.join(home, "work", run, "train", f"attempt-{n}.log")):
        if os.path.exists(p):
            return p
    return None
train = next(s for s in r["steps"] if s["name"] == "train")
checked = 0
for a in train["attempts_detail"][1:]:
    path, prev = log_of(a["n"]), log_of(a["n"] - 1)
    if not path or not prev:
        bad.append(f"train attempt {a['n']}: log missing")
        continue
    checked += 1
    last = [int(x) for x in re.findall(r'"step":\s*(\d+)', open(prev).read())]
    res = re.search(r'"event":\s*"resume",\s*"step":\s*(\d+)', open(path).read())
    start = int(res.group(1)) if res else 0
    if last and max(last) - start > every:
        bad.append(f"attempt {a['n']} restarted at step {start}, the killed one reached {max(last)}")
attempts = {s["name"]: s["attempts"] for s in r["steps"]}
print(f"round {rnd}: {'ok' if not bad else 'FAILED'} attempts {attempts}, resumes checked {checked}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
  then failed=$((failed + 1)); cat "$work/resume.err"; fi
done
echo "soak: $ROUNDS rounds, $kills kills, $failed failed"
((failed == 0))
