-- The runs page lists every run newest first (`ORDER BY created_at_ms DESC, id DESC`): without
-- this index each page read and sorted the whole table (issue #19, 100k waiting runs).
CREATE INDEX agent_run_created ON agent_run (created_at_ms, id);
