-- 0007_schedules: registered pipelines (`tpuflow pipelines add`) and what their schedules did.
-- A schedule runs the text that was added (source, digest), not whatever the file holds later.
-- (Table pipelines keeps every text a run was created from; this one the pipelines that are
-- registered, one per name.)
-- Every tick a schedule handles gets one schedule_fires row under a unique fire key
-- (PIPELINE@TICK), so a tick fires at most once whichever process handles it.
CREATE TABLE registered_pipelines (
	name TEXT PRIMARY KEY,
	path TEXT,                  -- the file it was added from, for people
	source TEXT NOT NULL,       -- the pipeline text as added
	digest TEXT NOT NULL,       -- SHA-256 of source, hex
	added_at REAL NOT NULL,
	cron TEXT,                  -- its schedule (NULL: none), as written
	timezone TEXT,
	next_tick INTEGER           -- the first tick not handled yet (Unix seconds)
);

CREATE TABLE schedule_fires (
	fire_key TEXT PRIMARY KEY,  -- PIPELINE@TICK
	pipeline TEXT NOT NULL,
	tick INTEGER NOT NULL,      -- the scheduled time (Unix seconds)
	outcome TEXT NOT NULL,      -- fired, skipped (concurrency forbid), missed (catch-up, deadline)
	run_id TEXT,                -- fired: the run created
	reason TEXT,
	at REAL NOT NULL            -- when it was handled
);
CREATE INDEX schedule_fires_pipeline ON schedule_fires(pipeline, tick);
