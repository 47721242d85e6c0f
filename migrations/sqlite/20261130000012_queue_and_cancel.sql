-- Queued runs: a new run, and a run whose decision was claimed, wait in `queued` until a worker
-- of some instance takes them (oldest `queued_at_ms` first), up to each instance's limit of
-- running runs. The previews' bases of a claimed decision travel with it, so any instance can
-- carry it out checking what the operator saw.
ALTER TABLE agent_run ADD COLUMN queued_at_ms BIGINT;
ALTER TABLE agent_run ADD COLUMN approved_bases TEXT;
CREATE INDEX agent_run_queue ON agent_run (queued_at_ms, id) WHERE status = 'queued';
-- Cancel of a running run: who asked and why, until the instance that drives it stops it at its
-- next step.
ALTER TABLE agent_run ADD COLUMN cancel_by TEXT;
ALTER TABLE agent_run ADD COLUMN cancel_reason TEXT;
