-- A write-and-read health check: every ping is one row.
CREATE TABLE ping (
    id BIGSERIAL PRIMARY KEY,
    created_at_ms BIGINT NOT NULL
);
