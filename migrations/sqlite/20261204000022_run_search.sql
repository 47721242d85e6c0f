-- Text search in runs' prompts and answers (the run list and the inbox): words and word
-- prefixes, case ignored. An FTS5 index holding no copy of the text; its rows are keyed by
-- `agent_run_search_key.n` (a rowid of our own, which VACUUM keeps, unlike agent_run's).
--
-- A run's own writes only queue it (a new run for its prompt, a finished one for its answer):
-- an FTS5 write in every transition's commit would halve the approve cycle, so the server's
-- indexer writes the queued runs in batches, within a second. A purged run leaves the index
-- and the queue with it. Runs that exist already are indexed here.
CREATE TABLE agent_run_search_key (
    n INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE
);
CREATE VIRTUAL TABLE agent_run_search USING fts5(
    prompt, answer, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 0'
);
CREATE TABLE agent_run_search_queue (
    run_id TEXT PRIMARY KEY NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER agent_run_search_insert AFTER INSERT ON agent_run BEGIN
    INSERT OR IGNORE INTO agent_run_search_queue (run_id) VALUES (new.id);
END;
CREATE TRIGGER agent_run_search_answer AFTER UPDATE OF final_answer ON agent_run
WHEN old.final_answer IS NOT new.final_answer BEGIN
    INSERT OR IGNORE INTO agent_run_search_queue (run_id) VALUES (new.id);
END;
CREATE TRIGGER agent_run_search_delete AFTER DELETE ON agent_run BEGIN
    DELETE FROM agent_run_search
        WHERE rowid = (SELECT n FROM agent_run_search_key WHERE run_id = old.id);
    DELETE FROM agent_run_search_key WHERE run_id = old.id;
    DELETE FROM agent_run_search_queue WHERE run_id = old.id;
END;
INSERT INTO agent_run_search_key (run_id) SELECT id FROM agent_run;
INSERT INTO agent_run_search (rowid, prompt, answer)
    SELECT k.n,
        CASE WHEN json_valid(r.configuration) THEN json_extract(r.configuration, '$.prompt') END,
        r.final_answer
    FROM agent_run r JOIN agent_run_search_key k ON k.run_id = r.id;
