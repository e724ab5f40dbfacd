-- 0011_run_step_counts: each run carries how many steps it has and how many are done
-- (succeeded, cached or skipped), kept by triggers inside the transaction that changes a step,
-- so a page of runs (GET /api/v1/runs, `runs list`) reads them from the run's row instead of
-- counting the steps of every run on the page.
ALTER TABLE runs ADD COLUMN steps_total INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN steps_done INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET
	steps_total = (SELECT count(*) FROM steps WHERE run_id = runs.id),
	steps_done = (SELECT count(*) FROM steps WHERE run_id = runs.id
	              AND state IN ('succeeded', 'cached', 'skipped'));
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps BEGIN
	UPDATE runs SET steps_total = steps_total + 1,
	                steps_done = steps_done + (NEW.state IN ('succeeded', 'cached', 'skipped'))
	WHERE id = NEW.run_id;
END;
CREATE TRIGGER steps_count_update AFTER UPDATE OF state ON steps
WHEN (OLD.state IN ('succeeded', 'cached', 'skipped')) !=
     (NEW.state IN ('succeeded', 'cached', 'skipped')) BEGIN
	UPDATE runs SET steps_done = steps_done + (CASE WHEN NEW.state IN
	                ('succeeded', 'cached', 'skipped') THEN 1 ELSE -1 END)
	WHERE id = NEW.run_id;
END;
CREATE TRIGGER steps_count_delete AFTER DELETE ON steps BEGIN
	UPDATE runs SET steps_total = steps_total - 1,
	                steps_done = steps_done - (OLD.state IN ('succeeded', 'cached', 'skipped'))
	WHERE id = OLD.run_id;
END;
