-- Agent-as-tool: a child session works on a task for a call of its parent's agent.
alter table sessions
    add column parent_session_id text references sessions (session_id),
    add column parent_call_id text;

create index sessions_parent on sessions (parent_session_id) where parent_session_id is not null;
