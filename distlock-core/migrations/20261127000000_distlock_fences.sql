-- distlock's fenced writes (`distlock::fence::sqlx`): one row per resource, holding the highest
-- fencing token that has written it and the name of that token's lock. `advance` moves a row
-- forward only; tokens are u64, kept exactly as NUMERIC(20, 0).
CREATE TABLE IF NOT EXISTS distlock_fences (
    resource   TEXT           PRIMARY KEY,
    lock_name  TEXT           NOT NULL,
    token      NUMERIC(20, 0) NOT NULL,
    updated_at TIMESTAMPTZ    NOT NULL DEFAULT now()
);
