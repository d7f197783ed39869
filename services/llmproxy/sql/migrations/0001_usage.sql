-- One row per upstream completion, for per-session usage accounting.
create table llm_requests (
    id bigserial primary key,
    session_id text not null,
    purpose text not null default '',
    model text not null,
    started_at timestamptz not null default now(),
    duration_ms double precision not null,
    success boolean not null,
    error_code text,
    prompt_tokens integer not null default 0,
    completion_tokens integer not null default 0,
    with_tools boolean not null default false
);

create index llm_requests_session on llm_requests (session_id, started_at);
