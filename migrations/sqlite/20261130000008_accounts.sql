-- Who may do what (crates/nrllm-store/src/accounts.rs). Secrets (sessions, API tokens, login
-- links) are stored only as their SHA-256; passwords as argon2id hashes.
CREATE TABLE app_user (
    name TEXT PRIMARY KEY NOT NULL,
    -- NULL: the user logs in only by a one-time link (the first admin without a password).
    password_hash TEXT,
    role TEXT NOT NULL,
    disabled BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE app_session (
    token_hash TEXT PRIMARY KEY NOT NULL,
    user_name TEXT NOT NULL REFERENCES app_user (name) ON DELETE CASCADE,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX app_session_user ON app_session (user_name);

CREATE TABLE api_token (
    name TEXT PRIMARY KEY NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    last_used_at_ms BIGINT
);

CREATE TABLE login_link (
    token_hash TEXT PRIMARY KEY NOT NULL,
    user_name TEXT NOT NULL REFERENCES app_user (name) ON DELETE CASCADE,
    expires_at_ms BIGINT NOT NULL
);

-- Server-wide secrets every instance shares (the key that signs error banners).
CREATE TABLE app_secret (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
