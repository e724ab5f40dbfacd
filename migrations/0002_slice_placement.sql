-- 0002_slice_placement: where a train attempt's slice sits, as columns rather than text, so
-- `tpuflow slices` can draw every run's jobs on one map. A row is written when the attempt
-- asks for a slice (queued_at set, no box yet, wait_reason from the run's scheduler), gets its
-- box when the scheduler places it (started_at: when), and is completed (finished_at,
-- slice_seconds) when it ends. A request withdrawn before placement deletes its row.

ALTER TABLE slice_jobs ADD COLUMN pool TEXT;       -- pool name in the run's scheduler, e.g. v4
ALTER TABLE slice_jobs ADD COLUMN pool_spec TEXT;  -- that pool as GEN:AxBxC, e.g. v4:4x4x8
ALTER TABLE slice_jobs ADD COLUMN box_x INTEGER;   -- origin of the box of chips
ALTER TABLE slice_jobs ADD COLUMN box_y INTEGER;
ALTER TABLE slice_jobs ADD COLUMN box_z INTEGER;
ALTER TABLE slice_jobs ADD COLUMN box_a INTEGER;   -- extents along x, y, z (rotation as placed)
ALTER TABLE slice_jobs ADD COLUMN box_b INTEGER;
ALTER TABLE slice_jobs ADD COLUMN box_c INTEGER;
ALTER TABLE slice_jobs ADD COLUMN project TEXT;    -- scheduler project ('default')
ALTER TABLE slice_jobs ADD COLUMN priority INTEGER;
ALTER TABLE slice_jobs ADD COLUMN queued_at REAL;  -- when the attempt asked for its slice
ALTER TABLE slice_jobs ADD COLUMN wait_reason TEXT; -- while not placed: why, for people
CREATE INDEX slice_jobs_open ON slice_jobs(finished_at);
