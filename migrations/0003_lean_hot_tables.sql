-- 0003_lean_hot_tables: the tables written at every step transition are stored in their key
-- order (WITHOUT ROWID) instead of as a rowid table plus a separate key index. Every commit
-- then dirties one b-tree page per table instead of two, which is what a commit costs: on the
-- development VM a 1000-step chain wrote 9.1 WAL pages per commit before, about 6 after
-- (bench/dag; docs/benchmarks.md). Columns and their meaning are unchanged, except that
-- events.id now counts per run (1, 2, ... in the order the events were written), which is the
-- only order anything reads them in.

CREATE TABLE attempts_new (
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
) WITHOUT ROWID;
INSERT INTO attempts_new(run_id, step, n, state, failure_class, exit_code, error, backoff,
			 log_key, started_at, finished_at)
	SELECT run_id, step, n, state, failure_class, exit_code, error, backoff, log_key,
	       started_at, finished_at FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;

CREATE TABLE events_new (
	run_id TEXT NOT NULL,
	id INTEGER NOT NULL,             -- 1, 2, ... per run, in the order written
	at REAL NOT NULL,
	step TEXT,
	attempt INTEGER,
	kind TEXT NOT NULL,              -- run, step, attempt, model, deploy
	from_state TEXT,
	to_state TEXT,
	message TEXT,
	PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
INSERT INTO events_new(run_id, id, at, step, attempt, kind, from_state, to_state, message)
	SELECT run_id, id, at, step, attempt, kind, from_state, to_state, message FROM events;
DROP INDEX events_run;
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;

CREATE TABLE step_cache_new (
	key TEXT PRIMARY KEY,            -- SHA-256 of the step's inputs (see orchestrator/engine.c)
	run_id TEXT NOT NULL,            -- run that produced the results
	step TEXT NOT NULL,
	outputs TEXT NOT NULL,
	metrics TEXT NOT NULL,
	created_at REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO step_cache_new(key, run_id, step, outputs, metrics, created_at)
	SELECT key, run_id, step, outputs, metrics, created_at FROM step_cache;
DROP TABLE step_cache;
ALTER TABLE step_cache_new RENAME TO step_cache;
