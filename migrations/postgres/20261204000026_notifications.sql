-- Where people are reached (email, Slack), the notifications sent to them when a run waits
-- (crates/nrllm-store/src/notifications.rs), and the decision links they used.
ALTER TABLE app_user ADD COLUMN email TEXT;
ALTER TABLE app_user ADD COLUMN slack_team_id TEXT;
ALTER TABLE app_user ADD COLUMN slack_user_id TEXT;
-- A Slack user is one playground user.
CREATE UNIQUE INDEX app_user_slack ON app_user (slack_team_id, slack_user_id);

-- One row per round of notifications for a waiting turn (its run id and version): `waiting`
-- when it begins to wait, `reminder`, `escalation`. The instance that writes the round writes
-- its notifications in the same transaction, so each round is sent once, whatever the instances.
CREATE TABLE notification_round (
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    run_version BIGINT NOT NULL,
    round TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, run_version, round)
);

-- One notification: a mail to a user, or a Slack message in a channel. Sent with retries, like
-- a webhook delivery; never a journal step (the turn's digest stays the same).
CREATE TABLE notification (
    id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    run_version BIGINT NOT NULL,
    round TEXT NOT NULL,
    -- email | slack
    channel TEXT NOT NULL,
    -- The user's name (email), or the channel (slack).
    recipient TEXT NOT NULL,
    -- The address it went to (the mail address, the Slack channel).
    address TEXT NOT NULL,
    -- pending | delivered | failed | obsolete
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    -- What the channel calls the message (Slack's channel and ts), to update it later.
    message_ref TEXT,
    -- When a posted message was updated to say how the turn was decided.
    closed_at_ms BIGINT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    delivered_at_ms BIGINT,
    UNIQUE (run_id, run_version, round, channel, recipient)
);
CREATE INDEX notification_due ON notification (state, next_attempt_at_ms);
CREATE INDEX notification_run ON notification (run_id, run_version);

-- Decision links (a mailed Approve or Deny) that decided: each decides once.
CREATE TABLE decision_link_use (
    link_id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES agent_run (id) ON DELETE CASCADE,
    used_by TEXT NOT NULL,
    used_at_ms BIGINT NOT NULL
);
