-- The demo site the built-in tools read and change: pages with a history of every change, an
-- outbox for messages (nothing leaves the machine), tool enable/disable settings.
CREATE TABLE site_page (
    slug TEXT PRIMARY KEY NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE site_page_history (
    id BIGSERIAL PRIMARY KEY,
    slug TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    run_id TEXT,
    before_json TEXT,
    after_json TEXT,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX site_page_history_slug ON site_page_history (slug, id);

CREATE TABLE site_outbox (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    actor TEXT NOT NULL,
    run_id TEXT,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE site_meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

-- `tool:<name>` or `group:<name>` → enabled (0 or 1).
CREATE TABLE tool_setting (
    key TEXT PRIMARY KEY NOT NULL,
    enabled BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
