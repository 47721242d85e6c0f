-- The tamper-evident decision log: every event row stores its predecessor's hash and its own
-- (crates/nrllm-store/src/chain.rs). Rows written before this migration have neither; the
-- verifier reports them as unchained.
ALTER TABLE agent_run_event ADD COLUMN prev_hash TEXT;
ALTER TABLE agent_run_event ADD COLUMN hash TEXT;
