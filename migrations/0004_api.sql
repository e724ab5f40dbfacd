-- 0004_api: what the REST API of `tpuflow daemon` keeps: bearer tokens (only their SHA-256),
-- idempotency keys of creating POSTs with the response they got, run labels, and one global
-- sequence over events so `GET /api/v1/events` can resume from Last-Event-ID without missing
-- an event (events.id counts per run; SQLite has one writer at a time, so a sequence number
-- given inside the writing transaction follows commit order).

CREATE TABLE api_tokens (
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL,
	prefix TEXT NOT NULL UNIQUE,     -- first characters of the token, for lookup and display
	hash TEXT NOT NULL,              -- SHA-256 of the whole token, hex
	scope TEXT NOT NULL,             -- read, trigger, admin, predict
	created_at REAL NOT NULL,
	expires_at REAL,                 -- NULL: never
	revoked_at REAL,
	last_used_at REAL
);

CREATE TABLE idempotency_keys (
	token_id INTEGER NOT NULL,       -- keys belong to the caller (0 when auth is off)
	key TEXT NOT NULL,
	digest TEXT NOT NULL,            -- SHA-256 of method, path and body
	status INTEGER NOT NULL,         -- the first response, replayed as it was
	response TEXT NOT NULL,
	location TEXT,
	created_at REAL NOT NULL,
	PRIMARY KEY (token_id, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_age ON idempotency_keys(created_at);

CREATE TABLE run_labels (
	run_id TEXT NOT NULL,
	key TEXT NOT NULL,
	value TEXT NOT NULL,
	PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_labels_kv ON run_labels(key, value);

CREATE TABLE event_seq (
	seq INTEGER PRIMARY KEY,         -- commit order over every run
	run_id TEXT NOT NULL,
	id INTEGER NOT NULL              -- events.id of that run
);
INSERT INTO event_seq(run_id, id) SELECT run_id, id FROM events ORDER BY at, run_id, id;
CREATE TRIGGER events_seq AFTER INSERT ON events BEGIN
	INSERT INTO event_seq(run_id, id) VALUES (NEW.run_id, NEW.id);
END;
CREATE INDEX runs_created ON runs(created_at, id);
