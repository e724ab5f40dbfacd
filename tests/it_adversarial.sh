#!/usr/bin/env bash
# Integration: the ten-minute adversarial tour (docs/testing.md), scripted. Each check is one
# thing a hostile or careless user tried; each must end with a clear message and the right
# exit code, never a crash, a silent success or lost state. Runs in well under a minute.
. "$(dirname "$0")/lib.sh" it_adversarial adv
yaml() { printf '%s\n' "$2" >"$dir/$1.yaml"; }

# 1. the example pipelines run out of the box, from the repository root
expect 0 "" -- "$bin" validate pipelines/*.yaml
expect 0 "succeeded" -- "$bin" run pipelines/tabular-csv.yaml --home "$H" --plain
bundle=$("$bin" runs show "$(latest)" --home "$H" --json | python3 -c '
import json,sys
d=json.load(sys.stdin)
print([s for s in d["steps"] if s["name"]=="train"][0]["outputs"]["bundle"])')

# 2. a crafted .npy whose shape product wraps around (2^62 x 784 bytes)
python3 - "$dir/evil.npy" <<'PY'
import sys
hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (4611686018427387904, 784), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 4)
PY
expect 65 "" -- "$bin" predict --home "$H" --model "$bundle" --input "$dir/evil.npy"

# 3. values that would only fail at run time are refused at load, with positions
yaml bad 'name: bad
steps:
  - {name: a, type: shell, with: {argv: []}}
  - {name: t, type: train, with: {dataset: x, epochs: -1, batch: 0, lr: -1, hidden: [-5, 0]}}
  - {name: d, type: deploy, with: {model_name: m, version: -5, alias: "a/b", canary_percent: 150}}'
out=$("$bin" validate "$dir/bad.yaml" 2>&1); rc=$?
[[ $rc == 65 ]] || fail "validate of out-of-range values exited $rc: $out"
for w in argv epochs batch lr hidden version alias canary_percent; do
  grep -q "bad.yaml:[0-9]*:[0-9]*: error: .*$w" <<<"$out" || fail "validate did not place an error on '$w': $out"
done

# 4. registry: a bundle that does not exist, a bad model name
yaml reg 'name: reg
steps:
  - {name: r, type: register, with: {model_name: m, bundle: "runs/none/train/bundle/"}}'
expect 1 "is not in the store" -- "$bin" run "$dir/reg.yaml" --home "$H" --plain
yaml badname 'name: badname
steps:
  - {name: r, type: register, with: {model_name: "bad name! ../../x", bundle: b}}'
expect 65 "" -- "$bin" validate "$dir/badname.yaml"

# 5. a symbolic link planted in the file:// store does not lead outside it
mkdir -p "$dir/outside" && echo secret >"$dir/outside/s" && ln -s "$dir/outside" "$H/objects/link"
expect 65 "symbolic link" -- "$bin" store cat link/s --home "$H"

# 6. logs are bytes; numbers keep their source text; metrics must be numbers
yaml bytes 'name: bytes
params: {lr: 1.10, n: 012}
steps:
  - {name: s, type: shell, with: {argv: [sh, -c, "printf \"x \\377 y %s %s %s %s\\n\" \"$0\" \"$1\" \"$2\" \"$3\"", 1.10, 012, "${params.lr}", "${params.n}"]}}'
expect 0 "" -- "$bin" run "$dir/bytes.yaml" --home "$H" --plain
expect 0 "x � y 1.10 012 1.10 012" -- "$bin" runs logs "$(latest)" s --home "$H"

# 7. what does not exist: exit 66, and usage errors 64
expect 66 "no run" -- "$bin" runs show nosuchrun --home "$H"
expect 66 "no step" -- "$bin" runs logs "$(latest)" nosuchstep --home "$H"
expect 66 "no model" -- "$bin" models show nosuchmodel --home "$H"
expect 64 "" -- "$bin" runs nosuchverb --home "$H"

# 8. a relative store URL is recorded absolute
(cd "$dir" && "$bin" run bytes.yaml --home "$H" --storage file://relstore --plain >/dev/null 2>&1) ||
  fail "run with a relative store"
"$bin" runs show "$(latest)" --home "$H" --json | grep -qF "\"storage\": \"file://$dir/relstore\"" ||
  fail "the relative store URL was not recorded absolute"

# 9. a timeout counts from when the step runs, not while it waits for a worker
yaml queue 'name: queue
defaults: {timeout: 2s}
steps:
  - {name: a, type: shell, with: {argv: [sleep, "0.8"]}}
  - {name: b, type: shell, with: {argv: [sleep, "0.8"]}}
  - {name: c, type: shell, with: {argv: [sleep, "0.8"]}}
  - {name: d, type: shell, with: {argv: [sleep, "0.8"]}}'
expect 0 "succeeded" -- "$bin" run "$dir/queue.yaml" --home "$H" --workers 1 --plain

# 10. `run | head`: the reader leaves, the run goes on to its end
yaml pipe 'name: pipe
steps:
  - {name: a, type: shell, with: {argv: [sh, -c, "for i in $(seq 1 300); do echo line $i; done; sleep 0.3"]}}
  - {name: b, type: shell, needs: [a], with: {argv: [sleep, "0.3"]}}'
"$bin" run "$dir/pipe.yaml" --home "$H" --plain | head -1 >/dev/null
rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] || fail "'run | head' exited $rc (SIGPIPE is 141)"
"$bin" runs show "$(latest)" --home "$H" --json | grep -q '"state": "succeeded"' || fail "the run behind '| head' did not finish"

# 11. sizes whose cycle count passes 2^63 are refused, not wrapped
expect 65 "more than 2^63 cycles" -- "$bin" accel cycles --m 4000000000 --k 4000000000 --n 4000000000

# 12. a zero-byte database is not taken for a new one
mkdir -p "$dir/zero" && : >"$dir/zero/tpuflow.db" && touch -d '1 hour ago' "$dir/zero/tpuflow.db"
expect 69 "is empty (0 bytes)" -- "$bin" runs list --home "$dir/zero"
echo "it_adversarial: ok"
