-- 0014_serving_figures: what each serving process has seen of a canary rollout, so that the
-- rollout policy judges the answers of every process serving the model, not one process's
-- share (docs/serving.md, "Several serving processes").
--
-- One row per (deployment, serving process): server is a random id the process takes when it
-- starts; canary and stable are JSON text {requests, failures, hist: [[bucket, count], ...]}
-- of the canary's and of the stable version's answers since the deployment's window began in
-- that process (hist: the latency histogram of web/serve.c). Each process writes its row about
-- once a second while a canary with a policy is served, and reads the others' to judge. Rows
-- of a deployment that is no longer active are deleted by the next write.

CREATE TABLE serving_figures (
    deployment_id INTEGER NOT NULL REFERENCES deployments(id),
    server        TEXT NOT NULL,
    canary        TEXT NOT NULL,
    stable        TEXT NOT NULL,
    updated_at    REAL NOT NULL,
    PRIMARY KEY (deployment_id, server)
);
