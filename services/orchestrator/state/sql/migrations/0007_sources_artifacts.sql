-- Seed 003's tool_executions, sources and artifacts. Executions are the tool-call ledger
-- seen through a view; sources are what an agent read (file reads, searches), artifacts
-- what it produced (files written or patched, once the IDE confirmed).
create view tool_executions as
select call_id as execution_id, session_id, agent, tool_name, arguments, executor, state,
       result, plan_id, step_id, created_at as started_at,
       case when state in ('completed', 'failed', 'cancelled', 'rejected', 'expired')
            then updated_at end as finished_at
from tool_calls;

create table sources (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    call_id text not null,
    kind text not null,
    locator text not null,
    created_at timestamptz not null default now(),
    unique (call_id, locator)
);

create table artifacts (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    call_id text not null,
    kind text not null,
    path text not null,
    bytes integer not null default 0,
    created_at timestamptz not null default now(),
    unique (call_id, path)
);

create index sources_session on sources (session_id, id);
create index artifacts_session on artifacts (session_id, id);
