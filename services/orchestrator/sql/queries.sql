-- name: upsert_session
insert into orchestrator.sessions (session_id, user_id, title, system_prompt)
values ($1, $2, $3, $4)
on conflict (session_id) do nothing
returning session_id;

-- name: get_session
select s.session_id, s.user_id, s.title, s.system_prompt, s.current_agent,
       s.created_at, s.last_activity, s.deleted_at,
       (select count(*) from orchestrator.messages m where m.session_id = s.session_id)::int
           as message_count
from orchestrator.sessions s
where s.session_id = $1;

-- name: list_sessions
select s.session_id, s.user_id, s.title, s.system_prompt, s.current_agent,
       s.created_at, s.last_activity, s.deleted_at,
       (select count(*) from orchestrator.messages m where m.session_id = s.session_id)::int
           as message_count
from orchestrator.sessions s
where s.deleted_at is null and ($1 = '' or s.user_id = $1)
order by s.last_activity desc
limit $2;

-- name: add_message
with inserted as (
    insert into orchestrator.messages (session_id, role, content, name, tool_calls, tool_call_id)
    values ($1, $2, $3, $4, $5, $6)
    returning id, created_at
), touched as (
    update orchestrator.sessions set last_activity = now() where session_id = $1
)
select id, created_at from inserted;

-- name: history
select role, content, name, tool_calls, tool_call_id, created_at
from orchestrator.messages
where session_id = $1
order by id;

-- name: last_seq
select coalesce(max(seq), 0) from orchestrator.events where session_id = $1;

-- name: append_events
insert into orchestrator.events (session_id, seq, type, event)
select $1, unnest($2::bigint[]), unnest($3::text[]), unnest($4::bytea[]);

-- name: events_after
select seq, event from orchestrator.events
where session_id = $1 and seq > $2
order by seq
limit $3;
