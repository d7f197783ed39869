-- name: create_approval
-- Nothing on a call_id clash: the caller compares with the stored row (idempotent retry).
insert into hitl.approvals
    (call_id, session_id, tool_name, arguments, reason, risk, agent, plan_id, step_id,
     timeout_seconds, expires_at)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + make_interval(secs => $10))
on conflict (call_id) do nothing
returning *;

-- name: get_approval
select * from hitl.approvals where call_id = $1;

-- name: count_pending
select count(*) from hitl.approvals where status = 'pending' and expires_at > now();

-- name: list_pending
select * from hitl.approvals
where session_id = $1 and status = 'pending' and expires_at > now()
order by created_at, call_id;

-- name: apply_decision
-- The status guard makes this the single point where a decider wins; the audit row is
-- written by the same statement, so there is never a decision without its audit.
with decided as (
    update hitl.approvals
    set status = $3, decision = $4, modified_arguments = $5, feedback = $6, user_id = $7,
        decided_at = now()
    where call_id = $1 and session_id = $2 and status = 'pending' and expires_at > now()
    returning *
), audited as (
    insert into hitl.audit_log
        (session_id, call_id, tool_name, original_arguments, modified_arguments, decision,
         feedback, user_id, event_type)
    select session_id, call_id, tool_name, arguments, modified_arguments, decision,
           feedback, user_id, 'hitl_decision'
    from decided
)
select * from decided;

-- name: expire_call
with expired as (
    update hitl.approvals set status = 'expired'
    where call_id = $1 and status = 'pending' and expires_at <= now()
    returning *
), audited as (
    insert into hitl.audit_log
        (session_id, call_id, tool_name, original_arguments, decision, event_type)
    select session_id, call_id, tool_name, arguments, 'expired', 'hitl_timeout'
    from expired
)
select * from expired;

-- name: expire_due
-- SKIP LOCKED: replicas sweeping at once split the overdue rows instead of sharing them.
with due as (
    select call_id from hitl.approvals
    where status = 'pending' and expires_at <= now()
    order by expires_at
    limit $1
    for update skip locked
), expired as (
    update hitl.approvals a set status = 'expired'
    from due
    where a.call_id = due.call_id
    returning a.*
), audited as (
    insert into hitl.audit_log
        (session_id, call_id, tool_name, original_arguments, decision, event_type)
    select session_id, call_id, tool_name, arguments, 'expired', 'hitl_timeout'
    from expired
)
select * from expired order by expires_at, call_id;

-- name: record_audit
insert into hitl.audit_log
    (session_id, call_id, tool_name, original_arguments, modified_arguments, decision,
     feedback, user_id, event_type, details)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
returning *;

-- name: list_audit
-- An empty filter matches everything.
select * from hitl.audit_log
where ($1 = '' or session_id = $1) and ($2 = '' or event_type = $2)
order by created_at desc, id desc
limit $3;
