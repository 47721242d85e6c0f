-- The partial indexes of waiting runs, their predicates written term by term. SQLite evaluates an
-- `IN` list of three or more constants through a temporary B-tree it builds afresh each time, and a
-- partial index's predicate is evaluated for the old and the new row of every run a statement
-- changes: with the third waiting status (migration 24) each status change of a run built four
-- such trees — 14 of the 20 an approve cycle built, a sixth of its instructions (BENCHMARKS.md,
-- issue #46).
-- The queries that read through these indexes repeat the predicate as it is written here
-- (`RunStatus::sql_any`). Postgres evaluates an `IN` list without such a tree: its indexes stay.
DROP INDEX agent_run_waiting;
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms, id)
    WHERE (status = 'waiting_for_approval' OR status = 'waiting_for_input'
        OR status = 'waiting_for_budget');
DROP INDEX agent_run_deadline;
CREATE INDEX agent_run_deadline ON agent_run (approval_deadline_ms)
    WHERE (status = 'waiting_for_approval' OR status = 'waiting_for_input'
        OR status = 'waiting_for_budget')
    AND approval_deadline_ms IS NOT NULL;
