-- The approvals inbox pages waiting runs and filters them by configuration and by pending tool.
-- `provider` is the run's configuration name; `pending_tools` lists the tools of the turn waiting
-- for a decision as ",update_page,send_message," (set when the run suspends).
ALTER TABLE agent_run ADD COLUMN provider TEXT;
ALTER TABLE agent_run ADD COLUMN pending_tools TEXT;

UPDATE agent_run SET provider = json_extract(configuration, '$.provider')
WHERE json_valid(configuration);
UPDATE agent_run SET pending_tools = (
    SELECT ',' || group_concat(json_extract(value, '$.name'), ',') || ','
    FROM json_each(agent_run.suspended_state, '$.pending')
)
WHERE status = 'waiting_for_approval' AND json_valid(suspended_state);

-- Keyset paging of the inbox: oldest first, ties broken by id.
DROP INDEX agent_run_waiting;
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms, id) WHERE status = 'waiting_for_approval';
