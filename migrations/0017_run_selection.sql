-- 0017_run_selection: what `run --only STEP,...` or `run --from STEP` chose, kept with the run
-- as {"only": [STEP...]} or {"from": STEP} (NULL: the whole pipeline), so `runs retry` and
-- `runs resume` run only what the run selected: its steps skipped as not selected stay
-- skipped (docs/runs.md, "Running part of a pipeline").
ALTER TABLE runs ADD COLUMN selection TEXT;
