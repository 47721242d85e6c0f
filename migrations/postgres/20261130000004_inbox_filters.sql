-- The approvals inbox pages waiting runs and filters them by configuration and by pending tool.
-- `provider` is the run's configuration name; `pending_tools` lists the tools of the turn waiting
-- for a decision as ",update_page,send_message," (set when the run suspends).
ALTER TABLE agent_run ADD COLUMN provider TEXT;
ALTER TABLE agent_run ADD COLUMN pending_tools TEXT;

-- Filled from the stored JSON by pattern, so that a row whose JSON does not parse cannot stop the
-- migration (such a row then simply matches no filter).
UPDATE agent_run SET provider = substring(configuration from '"provider":"([^"]*)"');
UPDATE agent_run SET pending_tools = (
    SELECT ',' || string_agg(m[1], ',') || ','
    FROM regexp_matches(agent_run.suspended_state, '"name":"([^"]*)"', 'g') AS m
)
WHERE status = 'waiting_for_approval' AND suspended_state IS NOT NULL;

-- Keyset paging of the inbox: oldest first, ties broken by id.
DROP INDEX agent_run_waiting;
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms, id) WHERE status = 'waiting_for_approval';
