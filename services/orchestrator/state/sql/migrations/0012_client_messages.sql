-- Client message ids: a repeated user_message, switch_agent, cancel or plan_decision is
-- answered (`done` status `duplicate`, naming first_seq), never applied twice. Rows live
-- as long as their session (purged with it).
create table client_messages (
    session_id text not null references sessions (session_id),
    client_message_id text not null,
    kind text not null,
    -- Set when handling starts: the seq of the first event the message caused.
    first_seq bigint,
    started boolean not null default false,
    created_at timestamptz not null default now(),
    primary key (session_id, client_message_id)
);
