-- Webhook deliveries (crates/nrllm-store/src/webhooks.rs): one row per waiting turn of a run
-- (its id and version), made when the run starts waiting and delivered with retries. Only the
-- target's name is kept; its URL and secret come from the settings when it is sent.
CREATE TABLE webhook_delivery (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    run_version BIGINT NOT NULL,
    target TEXT NOT NULL,
    body TEXT NOT NULL,
    -- pending | delivered | failed | obsolete | skipped
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL,
    -- An instance sending it holds it until then; another instance leaves it alone.
    lease_until_ms BIGINT NOT NULL DEFAULT 0,
    last_status BIGINT,
    last_error TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    delivered_at_ms BIGINT,
    UNIQUE (run_id, run_version)
);
CREATE INDEX webhook_delivery_due ON webhook_delivery (state, next_attempt_at_ms);
