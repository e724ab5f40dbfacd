-- 0013_schedule_pause: a registered pipeline's schedule can be paused (`tpuflow schedules
-- pause NAME`, POST /api/v1/schedules/{name}:pause). While paused_at is set no tick of it is
-- handled: none fires and none is recorded missed; resuming continues from the first tick
-- after the resume (orchestrator/schedules.h).
ALTER TABLE registered_pipelines ADD COLUMN paused_at REAL;
