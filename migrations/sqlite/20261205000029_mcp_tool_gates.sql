-- What gated each MCP server's tools when they last joined (crates/nrllm-mcp/src/gates.rs): a
-- tool whose hints loosened while the program was down keeps its old gate at the next start
-- too, until an administrator accepts the change. `waits`: 1 when its calls waited for approval.
CREATE TABLE mcp_tool_gate (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    waits BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (server, tool)
);
