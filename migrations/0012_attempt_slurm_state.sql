-- 0012_attempt_slurm_state: the Slurm job state of an attempt run as a Slurm job (executor:
-- slurm), as the coordinator's newest squeue/sacct sweep saw it (PENDING, RUNNING, COMPLETED,
-- TIMEOUT, ...), written whenever it changes, so the API and the dashboard show where the job
-- is beside its id and nodes. NULL for other executors and before the first sighting.

ALTER TABLE attempts ADD COLUMN slurm_state TEXT;
