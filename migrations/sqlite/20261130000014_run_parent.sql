-- A run that goes on from another run's journal (a fork, a retry) names it, so the other run
-- can list what came of it.
ALTER TABLE agent_run ADD COLUMN parent_id TEXT;
CREATE INDEX agent_run_parent ON agent_run (parent_id) WHERE parent_id IS NOT NULL;
