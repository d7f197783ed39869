-- Tool calls waiting for a human, and their outcome. call_id is the LLM's tool-call id,
-- unique across sessions; Decide checks the session too, so a guessed id leaks nothing.
create table approvals (
    call_id text primary key,
    session_id text not null,
    tool_name text not null,
    arguments jsonb not null,
    reason text not null default '',
    risk text not null default 'medium',
    agent text not null default '',
    plan_id text,
    step_id text,
    status text not null default 'pending'
        check (status in ('pending', 'approved', 'edited', 'rejected', 'expired')),
    timeout_seconds double precision not null check (timeout_seconds > 0),
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    decided_at timestamptz,
    decision text check (decision in ('approve', 'edit', 'reject')),
    modified_arguments jsonb,
    feedback text,
    user_id text not null default ''
);

-- ListPending: a session's open approvals, oldest first.
create index approvals_pending_by_session on approvals (session_id, created_at)
    where status = 'pending';
-- ExpireDue: the overdue ones, without scanning decided history.
create index approvals_pending_by_expiry on approvals (expires_at)
    where status = 'pending';

-- Every human (or timeout) decision; append-only.
create table audit_log (
    id bigserial primary key,
    session_id text not null,
    call_id text not null default '',
    tool_name text not null default '',
    original_arguments jsonb,
    modified_arguments jsonb,
    decision text not null,
    feedback text,
    user_id text not null default '',
    event_type text not null,
    details jsonb,
    created_at timestamptz not null default now()
);

-- ListAudit: newest first, filtered by session and/or event type.
create index audit_log_by_session on audit_log (session_id, created_at desc, id desc);
create index audit_log_by_event_type on audit_log (event_type, created_at desc, id desc);
create index audit_log_by_time on audit_log (created_at desc, id desc);
