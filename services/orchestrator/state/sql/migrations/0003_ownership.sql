-- Which replica runs a session's turn, how a busy session treats new messages, and the
-- inbox through which a replica hands a message to the session's owner.
alter table sessions
    add column busy_policy text not null default 'enqueue'
        check (busy_policy in ('enqueue', 'reject', 'interrupt')),
    add column turn_state text not null default 'idle'
        check (turn_state in ('idle', 'running'));

create table inbox (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    user_id text not null default '',
    message bytea not null,
    created_at timestamptz not null default now()
);

create index inbox_session on inbox (session_id, id);
