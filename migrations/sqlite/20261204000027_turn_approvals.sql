-- M-of-N approvals (crates/nrllm-core/src/quorum.rs): how many distinct people must approve a
-- waiting run's turn, fixed when it began to wait, and each person's approval as it came. An
-- approval never moves the run (its version, and so the digest open pages carry, stays); the
-- approval that reaches the number claims the run in the same transaction.
ALTER TABLE agent_run ADD COLUMN approvals_required BIGINT NOT NULL DEFAULT 1;

-- One row a person a waiting turn (its run id and version): their latest approval. A token
-- counts as its user.
CREATE TABLE turn_approval (
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    run_version BIGINT NOT NULL,
    approver TEXT NOT NULL,
    token TEXT,
    -- What they approved: the choices and arguments that would run, hashed.
    fingerprint TEXT NOT NULL,
    -- The choices as the decision's record has them (JSON).
    decision TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, run_version, approver)
);

-- A webhook delivery for each approval counted toward such a turn too (`run.approval_counted`):
-- deliveries are now one a run's version and last step (`run_sequence`, which only a counted
-- approval moves while a run waits; null for deliveries made before).
CREATE TABLE webhook_delivery_next (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    run_version BIGINT NOT NULL,
    run_sequence BIGINT,
    target TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL DEFAULT 0,
    last_status BIGINT,
    last_error TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    delivered_at_ms BIGINT,
    UNIQUE (run_id, run_version, run_sequence)
);
INSERT INTO webhook_delivery_next (id, run_id, run_version, target, body, state, attempts,
    next_attempt_at_ms, lease_until_ms, last_status, last_error, created_at_ms, updated_at_ms,
    delivered_at_ms)
SELECT id, run_id, run_version, target, body, state, attempts, next_attempt_at_ms,
    lease_until_ms, last_status, last_error, created_at_ms, updated_at_ms, delivered_at_ms
FROM webhook_delivery;
DROP TABLE webhook_delivery;
ALTER TABLE webhook_delivery_next RENAME TO webhook_delivery;
CREATE INDEX webhook_delivery_due ON webhook_delivery (state, next_attempt_at_ms);
