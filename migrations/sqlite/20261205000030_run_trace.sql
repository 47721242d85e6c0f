-- A run's place in a distributed trace (crates/nrllm-core/src/trace.rs), fixed when it is
-- created: its trace id and root span id, the caller's span it joined or the run it was forked
-- or retried from (JSON). Null for runs created before.
ALTER TABLE agent_run ADD COLUMN trace TEXT;
