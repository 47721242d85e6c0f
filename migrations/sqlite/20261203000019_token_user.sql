-- An API token belongs to a user: it acts as that user (for four-eyes and in the log), with the
-- lower of its own role and theirs, and stops working when they are disabled. Tokens made before
-- this belong to the admin who created them (a token made through another token, to that
-- token's user); one whose creator cannot be found works no more.
ALTER TABLE api_token ADD COLUMN user_name TEXT;
UPDATE api_token SET user_name = created_by WHERE created_by NOT LIKE 'token:%';
UPDATE api_token SET user_name = (
    SELECT maker.user_name FROM api_token maker WHERE 'token:' || maker.name = api_token.created_by
) WHERE user_name IS NULL;
CREATE INDEX api_token_user ON api_token (user_name);
