-- 0005_attempt_slurm_job: the Slurm job that ran an attempt (executor: slurm), written when
-- sbatch accepts it, and the nodes it ran on. A coordinator that restarts finds the job of a
-- lost attempt here and follows it again instead of submitting a second one.

ALTER TABLE attempts ADD COLUMN slurm_job INTEGER;  -- Slurm job id, NULL for other executors
ALTER TABLE attempts ADD COLUMN slurm_nodes TEXT;   -- node list as Slurm writes it
