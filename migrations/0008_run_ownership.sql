-- 0008_run_ownership: who drives a run, proven by a token rather than by a process id, and
-- what a submitted run carries.
--
-- A process that drives a run claims it with one compare-and-set in one write transaction
-- (orchestrator/state.c, tf_run_claim): it writes its random owner token, its pid and the
-- time into the row only when the run is unowned, already its own, or its owner is gone (the
-- heartbeat is older than the lease, or the pid is no longer alive on this host). The owner
-- renews heartbeat_at while it drives the run, so a pid that was reused by an unrelated
-- process no longer blocks `runs resume` once the lease has passed.
-- cancel_requested_at is set by `tpuflow runs cancel`; the owner sees it at its next
-- heartbeat and stops the run. resume_on_start marks runs a daemon stopped on SIGTERM: the
-- next daemon on the home continues them.
-- trigger says how a run was submitted: cli, api or schedule (priority and project are
-- 0006's columns, labels are in run_labels of 0004).
-- attempts.pgid is the process group of the attempt's child process (shell steps and
-- `executor: local` steps): a resume kills a group that outlived its engine before it starts
-- the step again.

ALTER TABLE runs ADD COLUMN owner TEXT;               -- owner token (32 hex digits), NULL: none
ALTER TABLE runs ADD COLUMN heartbeat_at REAL;        -- the owner's last sign of life
ALTER TABLE runs ADD COLUMN cancel_requested_at REAL; -- `runs cancel` asked the owner to stop
ALTER TABLE runs ADD COLUMN resume_on_start INTEGER NOT NULL DEFAULT 0; -- a daemon drained it
ALTER TABLE runs ADD COLUMN trigger TEXT NOT NULL DEFAULT 'cli'; -- cli, api or schedule
ALTER TABLE attempts ADD COLUMN pgid INTEGER;         -- process group of its child, if any
