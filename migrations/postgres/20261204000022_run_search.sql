-- Text search in runs' prompts and answers (the run list and the inbox): words and word
-- prefixes, case ignored, as on SQLite (FTS5): everything but letters and digits separates
-- words, and the `simple` configuration neither stems nor drops words. Kept by a trigger: a new
-- run's prompt, a finished run's answer; a purged run leaves the index with it (the foreign
-- key). Runs that exist already are indexed here.
CREATE TABLE agent_run_search (
    run_id TEXT PRIMARY KEY REFERENCES agent_run (id) ON DELETE CASCADE,
    document TSVECTOR NOT NULL
);
CREATE INDEX agent_run_search_document ON agent_run_search USING GIN (document);

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

CREATE FUNCTION agent_run_search_write() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agent_run_search (run_id, document)
        VALUES (NEW.id, agent_run_search_document(NEW.configuration, NEW.final_answer))
        ON CONFLICT (run_id) DO UPDATE SET document = EXCLUDED.document;
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_run_search_insert AFTER INSERT ON agent_run
    FOR EACH ROW EXECUTE FUNCTION agent_run_search_write();
CREATE TRIGGER agent_run_search_answer AFTER UPDATE OF final_answer ON agent_run
    FOR EACH ROW WHEN (OLD.final_answer IS DISTINCT FROM NEW.final_answer)
    EXECUTE FUNCTION agent_run_search_write();

INSERT INTO agent_run_search (run_id, document)
    SELECT id, agent_run_search_document(configuration, final_answer) FROM agent_run;
