-- Responses whose usage the provider did not report: a run's token counts (and so its cost)
-- are then a lower bound, and the pages say so instead of reading the missing usage as zero.
ALTER TABLE agent_run ADD COLUMN unreported_usage INTEGER NOT NULL DEFAULT 0;
