-- A question an MCP server asked inside its open call (before MCP 2026-07-28) is answered
-- through that call, which only the instance that made it holds (crates/nrllm-mcp/src/held.rs).
-- While such a run waits, and once its answer queues it, only that instance takes it from the
-- queue: `held_by` is its lease owner id, `held_until_ms` how long the hold lasts unless that
-- instance renews it (with its heartbeat, as a lease). An instance that died holds nothing
-- after that: any instance takes the run, and the reply finds no call to go to.
ALTER TABLE agent_run ADD COLUMN held_by TEXT;
ALTER TABLE agent_run ADD COLUMN held_until_ms BIGINT;
CREATE INDEX agent_run_held ON agent_run (held_by) WHERE held_by IS NOT NULL;
