-- Persisted runs and their event streams (DESIGN §3, §5, §7). Times are Unix milliseconds (UTC).
-- Leases and effect keys come in later migrations as new columns and tables.
CREATE TABLE agent_run (
    id TEXT PRIMARY KEY NOT NULL,
    status TEXT NOT NULL,
    configuration TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    iterations BIGINT NOT NULL DEFAULT 0,
    tool_calls BIGINT NOT NULL DEFAULT 0,
    truncated BIGINT NOT NULL DEFAULT 0, -- 0 or 1 (sqlx Any has no portable boolean)
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens BIGINT NOT NULL DEFAULT 0,
    estimated_cost_micros BIGINT,
    termination_reason TEXT,
    error_summary TEXT,
    final_answer TEXT,
    suspended_state TEXT,
    decided_by TEXT,
    decided_at_ms BIGINT,
    decision TEXT,
    version BIGINT NOT NULL DEFAULT 0,
    last_sequence BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT,
    finished_at_ms BIGINT
);

CREATE INDEX agent_run_status_created ON agent_run (status, created_at_ms);
-- The approvals inbox: waiting runs, oldest first.
CREATE INDEX agent_run_waiting ON agent_run (updated_at_ms) WHERE status = 'waiting_for_approval';

CREATE TABLE agent_run_event (
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    kind TEXT NOT NULL,
    round BIGINT,
    duration_ms BIGINT,
    payload TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, sequence)
);
