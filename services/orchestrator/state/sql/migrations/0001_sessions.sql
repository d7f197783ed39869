-- Sessions, their messages (the LLM history) and every event sent to the IDE.
create table sessions (
    session_id text primary key,
    user_id text not null default '',
    title text not null default '',
    system_prompt text not null default '',
    current_agent text not null default 'universal',
    created_at timestamptz not null default now(),
    last_activity timestamptz not null default now(),
    deleted_at timestamptz
);

create index sessions_user_activity on sessions (user_id, last_activity desc)
    where deleted_at is null;

create table messages (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    role text not null check (role in ('system', 'user', 'assistant', 'tool')),
    content text not null default '',
    name text,
    tool_calls jsonb,
    tool_call_id text,
    created_at timestamptz not null default now()
);

create index messages_session on messages (session_id, id);

-- The replay log: a client resuming after seq N gets every later row once.
create table events (
    session_id text not null references sessions (session_id),
    seq bigint not null,
    type text not null,
    event bytea not null,
    created_at timestamptz not null default now(),
    primary key (session_id, seq)
);
