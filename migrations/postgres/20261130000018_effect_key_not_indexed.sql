-- An effect's key is its run, round and call (`run/round/call`, a run id never holds a `/`), which
-- the primary key already keeps unique; nothing looks an effect up by its key. Its own unique
-- index was one more index entry each dispatch wrote (issue #19).
ALTER TABLE agent_run_effect DROP CONSTRAINT agent_run_effect_effect_key_key;
