-- A write-and-read health check: every ping is one row.
CREATE TABLE ping (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at_ms BIGINT NOT NULL
);
