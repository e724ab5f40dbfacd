-- 0001_initial: runs, steps, attempts, events, artifacts, the model registry, the step cache,
-- deployments and slice jobs. Times are Unix seconds (REAL); JSON columns hold jansson text.

CREATE TABLE pipelines (
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL,
	digest TEXT NOT NULL,            -- SHA-256 of the YAML source
	path TEXT,                       -- where it was loaded from (informational)
	source TEXT NOT NULL,            -- the YAML itself, so a run can resume without the file
	created_at REAL NOT NULL,
	UNIQUE (name, digest)
);

CREATE TABLE runs (
	id TEXT PRIMARY KEY,             -- YYYYMMDD-HHMMSS-xxxxxx, sortable by creation time
	pipeline_id INTEGER NOT NULL REFERENCES pipelines(id),
	pipeline TEXT NOT NULL,          -- pipeline name, denormalised for listings
	state TEXT NOT NULL,             -- see orchestrator/state.c
	params TEXT NOT NULL DEFAULT '{}', -- --param overrides as given (JSON object of strings)
	storage TEXT,                    -- object store URL used by the run
	error TEXT,
	retry_of TEXT,                   -- run this one retries (runs retry), if any
	pid INTEGER,                     -- process driving the run while running
	created_at REAL NOT NULL,
	started_at REAL,
	finished_at REAL
);
CREATE INDEX runs_state ON runs(state);

CREATE TABLE steps (
	run_id TEXT NOT NULL REFERENCES runs(id),
	name TEXT NOT NULL,
	idx INTEGER NOT NULL,            -- position in the pipeline file
	type TEXT NOT NULL,
	state TEXT NOT NULL,
	attempts INTEGER NOT NULL DEFAULT 0,
	reason TEXT,                     -- why skipped / failed, for people
	cache_key TEXT,
	cache_hit INTEGER NOT NULL DEFAULT 0,
	with_json TEXT,                  -- resolved inputs of the latest attempt
	outputs TEXT,                    -- JSON object
	metrics TEXT,                    -- JSON object
	progress TEXT,                   -- latest progress line (JSON) of a long step
	slice TEXT,                      -- accelerator slice used, e.g. v4-8 at chips 0-3
	slice_seconds REAL NOT NULL DEFAULT 0,
	next_attempt_at REAL,            -- earliest start of the next attempt while retrying
	started_at REAL,
	finished_at REAL,
	PRIMARY KEY (run_id, name)
);

CREATE TABLE attempts (
	run_id TEXT NOT NULL,
	step TEXT NOT NULL,
	n INTEGER NOT NULL,              -- 1, 2, ... per step
	state TEXT NOT NULL,
	failure_class TEXT,              -- error, timeout, preempted, infra, cancelled
	exit_code INTEGER,
	error TEXT,
	backoff REAL,                    -- seconds waited before the next attempt
	log_key TEXT,                    -- object-store key of the captured log
	started_at REAL NOT NULL,
	finished_at REAL,
	PRIMARY KEY (run_id, step, n),
	FOREIGN KEY (run_id, step) REFERENCES steps(run_id, name)
);

CREATE TABLE events (
	id INTEGER PRIMARY KEY,
	at REAL NOT NULL,
	run_id TEXT NOT NULL,
	step TEXT,
	attempt INTEGER,
	kind TEXT NOT NULL,              -- run, step, attempt, model, deploy
	from_state TEXT,
	to_state TEXT,
	message TEXT
);
CREATE INDEX events_run ON events(run_id, id);

CREATE TABLE artifacts (
	id INTEGER PRIMARY KEY,
	run_id TEXT NOT NULL,
	step TEXT NOT NULL,
	name TEXT NOT NULL,              -- output name, e.g. bundle
	uri TEXT NOT NULL,               -- object-store key or URL
	digest TEXT,
	size INTEGER,
	created_at REAL NOT NULL,
	UNIQUE (run_id, step, name)
);

CREATE TABLE step_cache (
	key TEXT PRIMARY KEY,            -- SHA-256 of the step's inputs (see orchestrator/engine.c)
	run_id TEXT NOT NULL,            -- run that produced the results
	step TEXT NOT NULL,
	outputs TEXT NOT NULL,
	metrics TEXT NOT NULL,
	created_at REAL NOT NULL
);

CREATE TABLE models (
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL UNIQUE,
	created_at REAL NOT NULL
);

CREATE TABLE model_versions (
	model_id INTEGER NOT NULL REFERENCES models(id),
	version INTEGER NOT NULL,        -- 1, 2, ... per model
	run_id TEXT NOT NULL,
	step TEXT NOT NULL,
	bundle TEXT NOT NULL,            -- object-store key of the exported bundle
	checkpoint TEXT,
	dataset TEXT,                    -- dataset manifest key
	metrics TEXT NOT NULL DEFAULT '{}',
	params TEXT NOT NULL DEFAULT '{}',
	tags TEXT NOT NULL DEFAULT '{}',
	created_at REAL NOT NULL,
	PRIMARY KEY (model_id, version),
	UNIQUE (run_id, step)            -- a run's register step makes at most one version
);

CREATE TABLE aliases (
	model_id INTEGER NOT NULL REFERENCES models(id),
	alias TEXT NOT NULL,
	version INTEGER NOT NULL,
	updated_at REAL NOT NULL,
	PRIMARY KEY (model_id, alias)
);

CREATE TABLE deployments (
	id INTEGER PRIMARY KEY,
	model_id INTEGER NOT NULL REFERENCES models(id),
	alias TEXT NOT NULL,             -- serving label, e.g. production
	version INTEGER NOT NULL,        -- the version taking (100 - canary_percent)% of traffic
	canary_version INTEGER,          -- the version taking canary_percent% (NULL: none)
	canary_percent REAL NOT NULL DEFAULT 0,
	previous_version INTEGER,        -- what the alias pointed at before (for rollback)
	run_id TEXT,
	step TEXT,
	active INTEGER NOT NULL DEFAULT 1, -- 1 for the current deployment of (model, alias)
	created_at REAL NOT NULL
);
CREATE INDEX deployments_active ON deployments(model_id, alias, active);
CREATE UNIQUE INDEX deployments_step ON deployments(run_id, step) WHERE run_id IS NOT NULL;

CREATE TABLE slice_jobs (
	id INTEGER PRIMARY KEY,
	run_id TEXT NOT NULL,
	step TEXT NOT NULL,
	attempt INTEGER NOT NULL,
	slice TEXT NOT NULL,             -- slice type, e.g. v4-8
	placement TEXT,                  -- chips, as the scheduler describes them
	chips INTEGER NOT NULL,
	started_at REAL NOT NULL,
	finished_at REAL,
	slice_seconds REAL
);
CREATE INDEX slice_jobs_run ON slice_jobs(run_id);
