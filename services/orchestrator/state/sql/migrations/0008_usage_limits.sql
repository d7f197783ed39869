-- Per-user usage counters in fixed windows (a clock minute, a UTC day), shared by every
-- replica: a limit is checked and taken in one statement.
create table usage_counters (
    user_id text not null,
    metric text not null,
    window_start timestamptz not null,
    amount double precision not null default 0,
    primary key (user_id, metric, window_start)
);

create index usage_counters_window on usage_counters (window_start);

-- Sessions open at once: a user's live sessions by recent activity.
create index sessions_user_open on sessions (user_id, last_activity)
    where deleted_at is null and parent_session_id is null;
