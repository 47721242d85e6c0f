-- Approval rules: an operator's standing decision for one tool's calls (allow or deny, with
-- optional conditions on the arguments as JSON), for one run or for every run of one
-- configuration. A run's rules go with the run.
CREATE TABLE approval_rule (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT REFERENCES agent_run (id) ON DELETE CASCADE,
    configuration TEXT,
    tool TEXT NOT NULL,
    effect TEXT NOT NULL,
    conditions TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    CHECK ((run_id IS NULL) <> (configuration IS NULL))
);
CREATE INDEX approval_rule_run ON approval_rule (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX approval_rule_configuration ON approval_rule (configuration) WHERE configuration IS NOT NULL;
