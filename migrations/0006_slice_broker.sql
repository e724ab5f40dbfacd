-- 0006_slice_broker: one pool for every process on a state home. The broker
-- (orchestrator/broker.c) decides all slice requests in one transaction from the open
-- slice_jobs rows and writes its decisions back: a grant is the box on the row; a reclaim
-- (preempted for a more urgent job, or infra when a chip failed) is reclaim_at on the
-- holder's row, which the holder polls; a waiting row may hold the box being drained for it.
ALTER TABLE slice_jobs ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 1;
ALTER TABLE slice_jobs ADD COLUMN reclaim_at REAL;     -- when the holder was asked to release
ALTER TABLE slice_jobs ADD COLUMN reclaim_class TEXT;  -- 'preempted' or 'infra'
ALTER TABLE slice_jobs ADD COLUMN reclaim_reason TEXT; -- for people
ALTER TABLE slice_jobs ADD COLUMN hold TEXT;           -- waiting: box drained for it, x,y,z+a,b,c

-- Chips marked failed (`tpuflow slices fail`), until repaired.
CREATE TABLE failed_chips (
	pool TEXT NOT NULL, -- pool name, e.g. v4
	x INTEGER NOT NULL,
	y INTEGER NOT NULL,
	z INTEGER NOT NULL,
	failed_at REAL NOT NULL,
	reason TEXT,
	PRIMARY KEY (pool, x, y, z)
);

-- A run's scheduling class: its train attempts' default priority (0..9) and project.
ALTER TABLE runs ADD COLUMN priority INTEGER;
ALTER TABLE runs ADD COLUMN project TEXT;
