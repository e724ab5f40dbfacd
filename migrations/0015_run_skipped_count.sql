-- 0015_run_skipped_count: a run's `steps_done` counts the steps that have their results
-- (succeeded or cached) and `steps_skipped` those skipped by a gate or a need, so GET
-- /api/v1/runs says "2/3 done, 1 skipped" as `runs list` does (0011 counted skipped steps as
-- done). The triggers keep both inside the transaction that changes a step.
ALTER TABLE runs ADD COLUMN steps_skipped INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER steps_count_insert;
DROP TRIGGER steps_count_update;
DROP TRIGGER steps_count_delete;
UPDATE runs SET
	steps_done = (SELECT count(*) FROM steps WHERE run_id = runs.id
	              AND state IN ('succeeded', 'cached')),
	steps_skipped = (SELECT count(*) FROM steps WHERE run_id = runs.id AND state = 'skipped');
CREATE TRIGGER steps_count_insert AFTER INSERT ON steps BEGIN
	UPDATE runs SET steps_total = steps_total + 1,
	                steps_done = steps_done + (NEW.state IN ('succeeded', 'cached')),
	                steps_skipped = steps_skipped + (NEW.state = 'skipped')
	WHERE id = NEW.run_id;
END;
CREATE TRIGGER steps_count_update AFTER UPDATE OF state ON steps
WHEN OLD.state IS NOT NEW.state AND
     (OLD.state IN ('succeeded', 'cached', 'skipped') OR
      NEW.state IN ('succeeded', 'cached', 'skipped')) BEGIN
	UPDATE runs SET
		steps_done = steps_done + (NEW.state IN ('succeeded', 'cached')) -
		             (OLD.state IN ('succeeded', 'cached')),
		steps_skipped = steps_skipped + (NEW.state = 'skipped') - (OLD.state = 'skipped')
	WHERE id = NEW.run_id;
END;
CREATE TRIGGER steps_count_delete AFTER DELETE ON steps BEGIN
	UPDATE runs SET steps_total = steps_total - 1,
	                steps_done = steps_done - (OLD.state IN ('succeeded', 'cached')),
	                steps_skipped = steps_skipped - (OLD.state = 'skipped')
	WHERE id = OLD.run_id;
END;
