-- 0020_hook_disabled: a receiver that answers 410 Gone no longer wants this sender's alerts
-- (the Standard Webhooks specification: disable the endpoint). The hook is disabled: its
-- alerts are dead-lettered without a request, saying so, until `tpuflow hooks add` sets it
-- again (docs/alerts.md).
ALTER TABLE hooks ADD COLUMN disabled_at REAL;
ALTER TABLE hooks ADD COLUMN disabled_reason TEXT;
