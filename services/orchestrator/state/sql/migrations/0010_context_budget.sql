-- Context budget: every message's tokens, counted once when it is written (the budget
-- check before a model call is a sum); the model's reasoning, kept for the trace.
alter table messages
    add column tokens integer,
    add column reasoning text;

-- Rows written before the column existed: a rough count (about three characters a token).
update messages
    set tokens = 4 + (length(content) + coalesce(length(tool_calls::text), 0)) / 3;

alter table messages
    alter column tokens set not null,
    alter column tokens set default 0;

-- Compaction: a summary of a session's older messages (ids up to covers_to, from
-- covers_from), written by the model; the messages themselves stay.
create table summaries (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    covers_from bigint not null,
    covers_to bigint not null,
    messages integer not null,
    content text not null,
    tokens integer not null,
    created_at timestamptz not null default now()
);

create index summaries_session on summaries (session_id, id desc);
