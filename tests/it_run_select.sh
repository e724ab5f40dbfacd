#!/usr/bin/env bash
# Integration: running part of a pipeline and what a run knows of itself (docs/runs.md,
# "Running part of a pipeline", docs/pipeline.md "References" and "finally"): `run --only`,
# `--from`, `--dry-run`; ${run.id}, ${run.pipeline}, ${env.NAME} (passed to the step, never
# recorded); `finally:` steps that run whatever the outcome and see it as ${run.state};
# `runs retry` of a --only run runs only what it selected, and runs the finally steps again.
. "$(dirname "$0")/lib.sh" it_run_select sel
# state STEP: the step's state and reason in the newest run
state() { "$bin" runs show "$(latest)" --home "$H" --json | python3 -c '
import json,sys
d = json.load(sys.stdin)
s = [s for s in d["steps"] if s["name"] == sys.argv[1]][0]
print(s["state"], s["reason"] or "")' "$1"; }

cat >"$dir/p.yaml" <<'EOF'
name: sel
params:
  fail: {type: bool, default: false}
steps:
  - name: a
    type: shell
    with:
      argv: [sh, -c, 'echo "$0" > "$TPUFLOW_OUTPUTS.tmp"; echo "n=$(date +%s%N)" > "$TPUFLOW_OUTPUTS"', "${run.id}"]
      outputs: [n]
  - name: b
    type: shell
    needs: [a]
    with:
      argv: [sh, -c, 'echo "id=$0 pipeline=$1 from_a=$2 token=$TOKEN"; test "$3" = false', "${run.id}", "${run.pipeline}", "${steps.a.outputs.n}", "${params.fail}"]
      env: {TOKEN: "${env.TF_IT_TOKEN}"}
  - name: c
    type: shell
    needs: [b]
    with: {argv: [/bin/true]}
finally:
  - name: report
    type: shell
    with:
      argv: [sh, -c, 'echo "outcome=$0"', "${run.state}"]
  - name: page
    type: shell
    needs: [report]
    when: ${run.state} == 'failed'
    with: {argv: [sh, -c, 'echo paging']}
EOF

# 1. ${env.NAME}: unset is an error naming it, at its position; never recorded
unset TF_IT_TOKEN
expect 65 "p.yaml:15:21: error: environment variable TF_IT_TOKEN is not set" -- "$bin" run "$dir/p.yaml" --home "$H" --plain
expect 0 "warning: environment variable TF_IT_TOKEN is not set" -- "$bin" validate "$dir/p.yaml"
export TF_IT_TOKEN=hunter2-secret
expect 66 "there is none: run the whole pipeline first" -- "$bin" run "$dir/p.yaml" --home "$H" --from b
expect 0 "succeeded" -- "$bin" run "$dir/p.yaml" --home "$H" --plain
first=$(latest)
expect 0 "token=hunter2-secret" -- "$bin" runs logs "$first" b --home "$H"
expect 0 "id=$first pipeline=sel" -- "$bin" runs logs "$first" b --home "$H"
for f in "$H"/tpuflow.db*; do
  ! grep -q hunter2-secret "$f" || fail "the value of \${env.TF_IT_TOKEN} is in $f"
done
"$bin" runs show "$first" --home "$H" --json | grep -qF '${env.TF_IT_TOKEN}' || fail "the recorded with lost the reference"

# 2. finally: after success it sees succeeded (page skipped by its when)
[[ $(state report) == "succeeded "* ]] || fail "report after success: $(state report)"
[[ $(state page) == "skipped when: "* ]] || fail "page after success: $(state page)"
expect 0 "outcome=succeeded" -- "$bin" runs logs "$first" report --home "$H"
# ... and after a failure it runs too, sees failed; the run stays failed
expect 1 "" -- "$bin" run "$dir/p.yaml" --home "$H" --plain --param fail=true
[[ $(state c) == "skipped need 'b' failed" ]] || fail "c after b failed: $(state c)"
expect 0 "outcome=failed" -- "$bin" runs logs "$(latest)" report --home "$H"
expect 0 "paging" -- "$bin" runs logs "$(latest)" page --home "$H"

# 3. --dry-run: the plan, nothing recorded
before=$(sqlite3 "$H/tpuflow.db" 'SELECT count(*) FROM runs')
expect 0 "reused from run $first" -- "$bin" run "$dir/p.yaml" --home "$H" --from b --dry-run
expect 0 "skipped (not selected)" -- "$bin" run "$dir/p.yaml" --home "$H" --only b --dry-run
"$bin" run "$dir/p.yaml" --home "$H" --only b --dry-run --json | python3 -c '
import json,sys
d = json.load(sys.stdin)
acts = {s["name"]: s["action"] for s in d["steps"]}
assert acts == {"a": "reuse", "b": "run", "c": "skip", "report": "skip", "page": "skip"}, acts
assert d["reuse_from"] == sys.argv[1], d
' "$first" || fail "the --only plan"
[[ $(sqlite3 "$H/tpuflow.db" 'SELECT count(*) FROM runs') == "$before" ]] || fail "a dry run recorded a run"
expect 0 "dry run" -- "$bin" run "$dir/p.yaml" --home "$dir/fresh" --dry-run
[[ ! -e $dir/fresh ]] || fail "a dry run created the home"

# 4. --from b: a reused with the newest succeeded run's outputs, b and after run (not cached)
n_first=$("$bin" runs show "$first" --home "$H" --json | python3 -c 'import json,sys; print([s for s in json.load(sys.stdin)["steps"] if s["name"]=="a"][0]["outputs"]["n"])')
expect 0 "succeeded" -- "$bin" run "$dir/p.yaml" --home "$H" --from b --plain
[[ $(state a) == "cached reused from run $first (--from b)" ]] || fail "a with --from b: $(state a)"
expect 0 "  selection: --from b" -- "$bin" runs show "$(latest)" --home "$H"
"$bin" runs show "$first" --home "$H" | grep -q "selection:" && fail "a whole run shows a selection"
[[ $(state b) == "succeeded "* && $(state c) == "succeeded "* && $(state report) == "succeeded "* ]] || fail "b, c, report with --from b"
expect 0 "from_a=$n_first" -- "$bin" runs logs "$(latest)" b --home "$H"
# --only b: a reused, c and the finally steps not selected
expect 0 "succeeded" -- "$bin" run "$dir/p.yaml" --home "$H" --only b --plain
[[ $(state b) == "succeeded "* ]] || fail "b with --only b: $(state b)"
[[ $(state c) == "skipped not selected (--only b)" ]] || fail "c with --only b: $(state c)"
# 5. runs retry: a run made with --only runs again only what it selected; every finally
# step of a retried run runs again at its new end (also one that succeeded at the first)
cat >"$dir/q.yaml" <<YAML
name: sel2
steps:
  - {name: a, type: shell, with: {argv: [/bin/true]}}
  - {name: b, type: shell, needs: [a], with: {argv: [test, -e, "$dir/ok"]}}
  - {name: c, type: shell, needs: [b], with: {argv: [/bin/true]}}
finally:
  - {name: report, type: shell, with: {argv: [sh, -c, 'echo "outcome=\$0"', '\${run.state}']}}
YAML
touch "$dir/ok"
expect 0 "succeeded" -- "$bin" run "$dir/q.yaml" --home "$H" --plain
rm "$dir/ok"
expect 1 "" -- "$bin" run "$dir/q.yaml" --home "$H" --only b --plain
onlyrun=$(latest)
touch "$dir/ok"
expect 0 "succeeded" -- "$bin" runs retry "$onlyrun" --home "$H" --plain
[[ $(state b) == "succeeded "* ]] || fail "b after the retry: $(state b)"
[[ $(state c) == "skipped not selected (--only b)" ]] || fail "c after the retry of --only b: $(state c)"
[[ $(state report) == "skipped not selected (--only b)" ]] || fail "report after the retry of --only b: $(state report)"
"$bin" runs show "$onlyrun" --home "$H" --json | python3 -c '
import json, sys
assert json.load(sys.stdin)["selection"] == {"only": ["b"]}' || fail "the run does not show its selection"
expect 0 "  selection: --only b" -- "$bin" runs show "$onlyrun" --home "$H"
rm "$dir/ok"
expect 1 "" -- "$bin" run "$dir/q.yaml" --home "$H" --plain
[[ $(state report) == "succeeded "* ]] || fail "report after b failed: $(state report)"
touch "$dir/ok"
expect 0 "succeeded" -- "$bin" runs retry "$(latest)" --home "$H" --plain
[[ $(state report) == "succeeded "* ]] || fail "report after the retry: $(state report)"
expect 0 "outcome=succeeded" -- "$bin" runs logs "$(latest)" report --home "$H"
"$bin" runs show "$(latest)" --home "$H" --json | python3 -c '
import json, sys
r = [s for s in json.load(sys.stdin)["steps"] if s["name"] == "report"][0]
assert [a["state"] for a in r["attempts_detail"]] == ["succeeded", "succeeded"], r' || fail "report did not run again at the new end"

expect 65 "--only nosuch: the pipeline has no such step" -- "$bin" run "$dir/p.yaml" --home "$H" --only nosuch
expect 64 "give one" -- "$bin" run "$dir/p.yaml" --home "$H" --only b --from b
echo "it_run_select: ok"
