-- 0019_metric_totals: running totals behind the counters of /metrics (docs/api.md). A
-- Prometheus counter (and a histogram's buckets, sum and count) must never go down, or
-- rate() and increase() read the drop as a restart and count everything again; the rows they
-- were summed from do go away: `runs delete` and `gc` remove a run's steps and slice jobs.
-- Each step that finishes and each slice released is added here in the transaction that
-- records it, and nothing removes from these tables. The rows kept so far are the start.
CREATE TABLE step_duration_totals (
	type TEXT NOT NULL,                -- the step's kind
	state TEXT NOT NULL,               -- the state it finished in
	n INTEGER NOT NULL,                -- finished steps
	seconds REAL NOT NULL,             -- their wall time, summed
	le_1 INTEGER NOT NULL,             -- those that took at most 1 s, 5 s, ... (the
	le_5 INTEGER NOT NULL,             -- histogram's bucket bounds, web/metrics.c)
	le_15 INTEGER NOT NULL,
	le_60 INTEGER NOT NULL,
	le_300 INTEGER NOT NULL,
	le_900 INTEGER NOT NULL,
	le_3600 INTEGER NOT NULL,
	le_14400 INTEGER NOT NULL,
	PRIMARY KEY (type, state)
);
INSERT INTO step_duration_totals
SELECT type, state, count(*), sum(d), sum(d <= 1), sum(d <= 5), sum(d <= 15), sum(d <= 60),
       sum(d <= 300), sum(d <= 900), sum(d <= 3600), sum(d <= 14400)
FROM (SELECT type, state, finished_at - started_at AS d FROM steps
      WHERE finished_at IS NOT NULL AND started_at IS NOT NULL)
GROUP BY type, state;

CREATE TABLE slice_seconds_totals (
	project TEXT PRIMARY KEY,          -- the scheduler project ('default' when none)
	seconds REAL NOT NULL              -- slice-seconds of finished train attempts
);
INSERT INTO slice_seconds_totals
SELECT coalesce(project, 'default'), sum(coalesce(slice_seconds, 0)) FROM slice_jobs
GROUP BY 1;
