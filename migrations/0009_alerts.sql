-- 0009_alerts: alerting hooks, the outbox alerts are delivered from, and the Alertmanager
-- alerts that stay firing until a later event resolves them (docs/alerts.md).
--
-- A hook is where alerts go: a URL and a body format. Its secret is never stored: the row
-- names an environment variable or a file, read by the process that sends the alert.
-- `events` is the hook's home-wide route: the events it receives from every run and from the
-- daemon, whatever the pipeline routes (pipelines route more in their `alerts:`).
CREATE TABLE hooks (
	name TEXT PRIMARY KEY,
	url TEXT NOT NULL,
	format TEXT NOT NULL,             -- standard, slack or alertmanager
	secret_env TEXT,                  -- the secret is in this environment variable, or
	secret_file TEXT,                 -- in this file (absolute path), read at each send
	events TEXT NOT NULL DEFAULT '',  -- home-wide route: comma-separated event names
	created_at REAL NOT NULL
);

-- The outbox: one row per alert and hook, inserted in the same transaction as the state
-- change that causes it, so no committed event goes without its alert. A delivery worker
-- takes due rows (lease_until marks the one sending it), posts them, and records the outcome:
-- delivered, another attempt at next_attempt_at (exponential backoff with jitter, Retry-After
-- honoured), or dead (too many attempts, too old, or refused for good). msg_id is the
-- webhook-id: the same on every attempt, so receivers drop duplicates by it.
CREATE TABLE alerts (
	id INTEGER PRIMARY KEY,
	msg_id TEXT NOT NULL UNIQUE,      -- msg_ and 32 hex digits
	event TEXT NOT NULL,              -- run_failed, step_retried, ... (docs/alerts.md)
	hook TEXT NOT NULL,               -- the hook's name (a hook removed later: dead-lettered)
	run_id TEXT,
	step TEXT,
	payload TEXT NOT NULL,            -- {type, timestamp, data}: what every format is made from
	state TEXT NOT NULL DEFAULT 'pending', -- pending, delivered, dead
	attempts INTEGER NOT NULL DEFAULT 0,
	next_attempt_at REAL NOT NULL,
	lease_until REAL,                 -- a worker is sending it until then
	last_status INTEGER,              -- HTTP status of the last attempt (NULL: no answer)
	last_error TEXT,
	created_at REAL NOT NULL,
	queued_at REAL NOT NULL,          -- created, or redelivered: the horizon counts from here
	delivered_at REAL,
	dead_at REAL,
	resolves INTEGER                  -- this row resolves the firing alert with that id
);
CREATE INDEX alerts_due ON alerts(state, next_attempt_at);

-- Alerts sent to an Alertmanager hook stay firing there until the condition clears: a later
-- run of the same pipeline that succeeds resolves them (a row with endsAt). One row per
-- firing alert; deleted when its resolving alert is queued.
CREATE TABLE alert_firing (
	alert_id INTEGER PRIMARY KEY,     -- the firing alert
	hook TEXT NOT NULL,
	pipeline TEXT NOT NULL,
	event TEXT NOT NULL
);
CREATE INDEX alert_firing_pipeline ON alert_firing(pipeline);
