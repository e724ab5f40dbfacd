-- 0002_slice_placement: where a train attempt's slice sits, as columns rather than text, so
-- `tpuflow slices` can draw every run's jobs on one map. A row is written when the scheduler
-- places the attempt (finished_at NULL while it holds the slice) and completed when it ends.

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
CREATE INDEX slice_jobs_open ON slice_jobs(finished_at);
