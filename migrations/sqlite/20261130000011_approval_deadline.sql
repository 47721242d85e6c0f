-- When a waiting run's turn expires if nobody decides (the configuration's approval_timeout);
-- NULL: it waits until decided. The sweepers look for the overdue ones.
ALTER TABLE agent_run ADD COLUMN approval_deadline_ms BIGINT;
CREATE INDEX agent_run_deadline ON agent_run (approval_deadline_ms) WHERE status = 'waiting_for_approval';
