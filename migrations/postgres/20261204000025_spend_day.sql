-- Each UTC day's spend across runs, per configuration and per user (the run's requester), in
-- millionths of a dollar, and what an administrator raised that day's cap by. Runs add to it
-- as each model response arrives, by one atomic increment, so that every instance sees one count.
CREATE TABLE spend_day (
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    day BIGINT NOT NULL,
    spent_micros BIGINT NOT NULL DEFAULT 0,
    raised_micros BIGINT NOT NULL DEFAULT 0,
    raised_by TEXT,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (scope, name, day)
);
