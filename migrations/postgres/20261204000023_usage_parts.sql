-- The parts of a run's token counts that are priced apart: prompt tokens read from and written to
-- the provider's cache, and completion tokens spent reasoning (each inside its count). Runs
-- written before read 0 for each, as their steps do: their cost is what it was.
ALTER TABLE agent_run ADD COLUMN cached_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agent_run ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agent_run ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
