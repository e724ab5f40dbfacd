-- 0016_run_cancelled: when a run's owner took its cancel. `runs cancel` (or the API) sets
-- cancel_requested_at (0008); the owner sees it at its next heartbeat and, in that
-- transaction, moves it here: the steps of `steps` stop, the `finally` steps run, and the run
-- ends failed ("cancelled") whatever they do. Being durable, the cancel survives a crash or a
-- draining daemon: the run that continues it runs only the finally steps. A cancel requested
-- while cancelled_at is set stops the finally steps too. Continuing a run that ended failed
-- (`runs retry`, `runs resume`) clears it.
ALTER TABLE runs ADD COLUMN cancelled_at REAL;
