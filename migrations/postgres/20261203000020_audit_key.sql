-- The audit log is keyed: each event row's MAC is keyed by a secret kept outside the database.
-- A run keeps the id of the key its log is chained by and its keyed head (a MAC of its last
-- sequence and last row's MAC), so that rows deleted from the end of its log are found too.
-- Runs from before this keep their plain SHA-256 chain and verify by that rule.
ALTER TABLE agent_run ADD COLUMN audit_key_id TEXT;
ALTER TABLE agent_run ADD COLUMN audit_head TEXT;
-- When each key came into use here (a MAC under the key says so): a run that began after it
-- and carries no keyed MAC was rewritten.
CREATE TABLE audit_anchor (
    key_id TEXT PRIMARY KEY NOT NULL,
    since_ms BIGINT NOT NULL,
    mac TEXT NOT NULL
);
