-- A run can also wait for a person to raise its budget (`waiting_for_budget`): the inbox and the
-- deadline sweep read every waiting status through these indexes.
DROP INDEX agent_run_waiting;
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms, id)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input', 'waiting_for_budget');
DROP INDEX agent_run_deadline;
CREATE INDEX agent_run_deadline ON agent_run (approval_deadline_ms)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input', 'waiting_for_budget')
    AND approval_deadline_ms IS NOT NULL;
