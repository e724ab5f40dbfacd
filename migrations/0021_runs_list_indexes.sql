-- 0021_runs_list_indexes: the runs listings (GET /api/v1/runs, `runs list`) filtered by state
-- or by pipeline read the runs they select in their (created_at, id) order, newest first, and
-- stop at the page's end: an index on (state, created_at, id) and one on (pipeline,
-- created_at, id). runs_state (state) alone made a listing by state read every run of that
-- state and sort them; the new index serves its other lookups by state as well.
DROP INDEX runs_state;
CREATE INDEX runs_state_created ON runs(state, created_at, id);
CREATE INDEX runs_pipeline_created ON runs(pipeline, created_at, id);
