-- name: take
-- Add $4 to the user's $2 counter of the current $3-second window unless that would pass
-- $5; amount is null when it would (nothing is taken). resets_in: seconds to the next window.
with w as (
    select to_timestamp(floor(extract(epoch from now()) / $3::float8) * $3::float8) as start
), taken as (
    insert into orchestrator.usage_counters (user_id, metric, window_start, amount)
    select $1, $2, w.start, $4::float8 from w where $4::float8 <= $5::float8
    on conflict (user_id, metric, window_start) do update
        set amount = usage_counters.amount + excluded.amount
        where usage_counters.amount + excluded.amount <= $5::float8
    returning amount
)
select (select amount from taken) as amount,
       extract(epoch from (select start from w) + make_interval(secs => $3::float8) - now())::float8
           as resets_in;

-- name: add
-- Add $3[i] to user $1[i]'s $2[i] counter of the current $4-second window, unconditionally
-- (one statement for the model calls counted since the last; each (user, metric) once).
-- Committed without waiting for the WAL flush, as add_message: the next flushed commit (a
-- turn's done at the latest) flushes it.
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
)
insert into orchestrator.usage_counters (user_id, metric, window_start, amount)
select m.user_id, m.metric,
       to_timestamp(floor(extract(epoch from now()) / $4::float8) * $4::float8), m.amount
from no_flush, unnest($1::text[], $2::text[], $3::float8[]) as m (user_id, metric, amount)
on conflict (user_id, metric, window_start) do update
    set amount = usage_counters.amount + excluded.amount;

-- name: read
-- The user's counters $2 (metric names) in the current $3-second window, with resets_in.
with w as (
    select to_timestamp(floor(extract(epoch from now()) / $3::float8) * $3::float8) as start
)
select m.metric,
       coalesce(c.amount, 0)::float8 as amount,
       extract(epoch from w.start + make_interval(secs => $3::float8) - now())::float8 as resets_in
from w
cross join unnest($2::text[]) as m (metric)
left join orchestrator.usage_counters c
    on c.user_id = $1 and c.metric = m.metric and c.window_start = w.start;

-- name: lock_user_sessions
-- Serialises session creation per user across replicas (until the transaction ends).
select pg_advisory_xact_lock(hashtext('codelab.sessions:' || $1));

-- name: session_exists
select exists (select 1 from orchestrator.sessions where session_id = $1);

-- name: open_sessions
-- The user's sessions active within $2 seconds; frees_in: when the least recent goes idle.
select count(*)::int as open,
       coalesce(extract(epoch from min(last_activity) + make_interval(secs => $2::float8) - now()), 0)
           ::float8 as frees_in
from orchestrator.sessions
where user_id = $1 and deleted_at is null and parent_session_id is null
  and last_activity > now() - make_interval(secs => $2::float8);

-- name: create_session
insert into orchestrator.sessions (session_id, user_id, title, system_prompt, current_agent)
values ($1, $2, $3, $4, $5)
on conflict (session_id) do nothing;

-- name: session_user
select user_id from orchestrator.sessions where session_id = $1;

-- name: prune
-- Windows that ended more than a day ago.
delete from orchestrator.usage_counters where window_start < now() - interval '2 days';
