-- Durable steps. A claim keeps the decision it carries out (`decision_record`) until the run
-- suspends again or ends, and dispatches every approved call in `agent_run_effect` (with the key
-- its effect is applied under) before the call runs; the call's result is journaled there with
-- the segment's next transition. The demo site applies each keyed effect at most once
-- (`site_effect`), and records the key on the change and the message it made.
ALTER TABLE agent_run ADD COLUMN decision_record TEXT;

CREATE TABLE agent_run_effect (
    run_id TEXT NOT NULL,
    round BIGINT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    effect_key TEXT NOT NULL UNIQUE,
    dispatched_at_ms BIGINT NOT NULL,
    result TEXT,
    outcome TEXT,
    completed_at_ms BIGINT,
    PRIMARY KEY (run_id, round, call_id)
);

CREATE TABLE site_effect (
    effect_key TEXT PRIMARY KEY NOT NULL,
    result TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

ALTER TABLE site_page_history ADD COLUMN effect_key TEXT;
ALTER TABLE site_outbox ADD COLUMN effect_key TEXT;
