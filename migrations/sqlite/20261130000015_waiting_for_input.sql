-- A run can also wait for an operator's answer (`waiting_for_input`): the inbox and the deadline
-- sweep read both waiting statuses through these indexes.
DROP INDEX agent_run_waiting;
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms, id)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input');
DROP INDEX agent_run_deadline;
CREATE INDEX agent_run_deadline ON agent_run (approval_deadline_ms)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input');
