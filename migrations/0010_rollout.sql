-- 0010_rollout: a deployment's rollout policy, and why each deployment was made.
--
-- rollout is the policy of a canary deployment as JSON text (NULL: none): the shares it steps
-- through, the soak time per step, the SLOs on the canary's error rate and p99 latency and
-- the fewest requests a judgement needs (docs/serving.md, "Rollout policy"). The server that
-- answers the canary's requests checks it continuously and moves the deployment: a new record
-- for each step, promotion or rollback. reason says why a record was made (NULL for the
-- deploy step's own), figures the canary's figures the decision was taken on (JSON text:
-- requests, failures, error rate, p99, window); created_at is when.

ALTER TABLE deployments ADD COLUMN rollout TEXT;
ALTER TABLE deployments ADD COLUMN reason TEXT;
ALTER TABLE deployments ADD COLUMN figures TEXT;
