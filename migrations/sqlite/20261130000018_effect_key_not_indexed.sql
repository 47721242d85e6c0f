-- An effect's key is its run, round and call (`run/round/call`, a run id never holds a `/`), which
-- the primary key already keeps unique; nothing looks an effect up by its key. Its own unique
-- index was one more tree each dispatch wrote (issue #19: ~1.2 of ~26 pages an approve cycle).
-- SQLite cannot drop a column's UNIQUE, so the table is built again without it.
CREATE TABLE agent_run_effect_new (
    run_id TEXT NOT NULL,
    round BIGINT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    effect_key TEXT NOT NULL,
    dispatched_at_ms BIGINT NOT NULL,
    result TEXT,
    outcome TEXT,
    completed_at_ms BIGINT,
    PRIMARY KEY (run_id, round, call_id)
);
INSERT INTO agent_run_effect_new
    (run_id, round, call_id, tool, arguments, effect_key, dispatched_at_ms, result, outcome,
     completed_at_ms)
SELECT run_id, round, call_id, tool, arguments, effect_key, dispatched_at_ms, result, outcome,
       completed_at_ms
FROM agent_run_effect;
DROP TABLE agent_run_effect;
ALTER TABLE agent_run_effect_new RENAME TO agent_run_effect;
