-- 0018_drop_runs_retry_of: runs.retry_of goes. Nothing ever wrote it: `runs retry` and
-- POST /api/v1/runs/{id}:retry retry a run in place (the same id, docs/runs.md), so the column
-- was NULL in every row and the API's `retry_of` always null. No index, view or trigger
-- names it, so SQLite (3.35 or later) drops it in place.
ALTER TABLE runs DROP COLUMN retry_of;
