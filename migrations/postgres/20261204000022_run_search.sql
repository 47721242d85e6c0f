-- Text search in runs' prompts and answers (the run list and the inbox): words and word
-- prefixes, case ignored, as on SQLite (FTS5): everything but letters and digits separates
-- words, and the `simple` configuration neither stems nor drops words.
--
-- A run's own writes only queue it (a new run for its prompt, a finished one for its answer);
-- the server's indexer writes the queued runs' documents in batches, within a second, so that
-- no transition's commit computes one. A purged run leaves the index with it (the foreign key)
-- and the queue (the purge deletes it: the queue has no foreign key, so that queueing a run
-- checks nothing). Runs that exist already are indexed here.
CREATE TABLE agent_run_search (
    run_id TEXT PRIMARY KEY REFERENCES agent_run (id) ON DELETE CASCADE,
    document TSVECTOR NOT NULL
);
CREATE INDEX agent_run_search_document ON agent_run_search USING GIN (document);
CREATE TABLE agent_run_search_queue (
    run_id TEXT PRIMARY KEY
);

CREATE FUNCTION agent_run_search_document(configuration TEXT, answer TEXT) RETURNS TSVECTOR
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    prompt TEXT;
BEGIN
    BEGIN
        prompt := configuration::jsonb ->> 'prompt';
    EXCEPTION WHEN others THEN
        prompt := NULL;
    END;
    RETURN to_tsvector('simple', regexp_replace(
        lower(coalesce(prompt, '') || ' ' || coalesce(answer, '')), '[^[:alnum:]]+', ' ', 'g'));
END
$$;

CREATE FUNCTION agent_run_search_enqueue() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_run_search_queue (run_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_run_search_insert AFTER INSERT ON agent_run
    FOR EACH ROW EXECUTE FUNCTION agent_run_search_enqueue();
CREATE TRIGGER agent_run_search_answer AFTER UPDATE OF final_answer ON agent_run
    FOR EACH ROW WHEN (OLD.final_answer IS DISTINCT FROM NEW.final_answer)
    EXECUTE FUNCTION agent_run_search_enqueue();

INSERT INTO agent_run_search (run_id, document)
    SELECT id, agent_run_search_document(configuration, final_answer) FROM agent_run;
