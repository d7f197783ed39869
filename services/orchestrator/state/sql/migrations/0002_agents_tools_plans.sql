-- Agent templates (versioned data), switches, the tool-call ledger and plans.
create table agent_templates (
    name text not null,
    version integer not null,
    definition jsonb not null,
    active boolean not null default true,
    created_at timestamptz not null default now(),
    primary key (name, version)
);

alter table sessions
    add column switch_count integer not null default 0,
    add column last_switch_at timestamptz;

create table agent_switches (
    id bigserial primary key,
    session_id text not null references sessions (session_id),
    from_agent text not null,
    to_agent text not null,
    reason text not null default '',
    confidence text,
    method text not null default '',
    switched_at timestamptz not null default now()
);

create index agent_switches_session on agent_switches (session_id, id);

-- Every tool call the model proposed, in the order it proposed them.
-- proposed -> awaiting_approval -> approved | edited | rejected | expired
--          -> dispatched -> completed | failed | cancelled
create table tool_calls (
    call_id text primary key,
    session_id text not null references sessions (session_id),
    position bigserial,
    agent text not null,
    tool_name text not null,
    arguments jsonb not null,
    executor text not null default 'ide',
    state text not null,
    requires_approval boolean not null default false,
    reason text,
    plan_id text,
    step_id text,
    result jsonb,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

create index tool_calls_open on tool_calls (session_id, position)
    where state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired');

create table plans (
    plan_id text primary key,
    session_id text not null references sessions (session_id),
    approval_request_id text not null unique,
    call_id text not null,
    planner text not null,
    goal text not null,
    steps jsonb not null,
    status text not null,
    current_step integer not null default 0,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

create index plans_session on plans (session_id, created_at);
