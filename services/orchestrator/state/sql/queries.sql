-- name: upsert_session
insert into orchestrator.sessions (session_id, user_id, title, system_prompt, current_agent)
values ($1, $2, $3, $4, $5)
on conflict (session_id) do nothing
returning session_id;

-- name: attach_session
-- The session a stream binds to, created on first use, in one round trip: its owner,
-- whether it is deleted (nothing counted: attaching must stay cheap), its system prompt and
-- the last seq of its log as this statement's snapshot sees it (where a new stream's events
-- start). A
-- creation commits without waiting for the WAL flush, as begin_turn: the stream's first
-- event flushes it, and a creation lost with nothing sent is redone by the next attach.
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
), created as (
    insert into orchestrator.sessions (session_id, user_id, current_agent, title, system_prompt)
    select $1, $2, $3, $4, $5 from no_flush
    on conflict (session_id) do nothing
    returning user_id, deleted_at, system_prompt
), logged as (
    select coalesce(max(seq), 0) as last_seq from orchestrator.events where session_id = $1
)
select user_id, deleted_at, system_prompt, last_seq from created, logged
union all
select user_id, deleted_at, system_prompt, last_seq from orchestrator.sessions, logged
where session_id = $1 and not exists (select 1 from created);

-- name: get_session
select s.session_id, s.user_id, s.title, s.system_prompt, s.current_agent,
       s.created_at, s.last_activity, s.deleted_at, s.switch_count, s.last_switch_at,
       s.busy_policy, s.turn_state, s.tool_tokens_offered, s.tool_tokens_all,
       s.agent_versions, s.clarifications_used, s.searches_used,
       (select count(*) from orchestrator.messages m where m.session_id = s.session_id)::int
           as message_count
from orchestrator.sessions s
where s.session_id = $1;

-- name: list_sessions
select s.session_id, s.user_id, s.title, s.system_prompt, s.current_agent,
       s.created_at, s.last_activity, s.deleted_at, s.switch_count, s.last_switch_at,
       s.busy_policy, s.turn_state, s.tool_tokens_offered, s.tool_tokens_all,
       (select count(*) from orchestrator.messages m where m.session_id = s.session_id)::int
           as message_count
from orchestrator.sessions s
where s.deleted_at is null and ($1 = '' or s.user_id = $1)
order by s.last_activity desc
limit $2;

-- name: add_messages
-- Messages of any sessions in one statement, in the given order (a session's messages keep
-- theirs): $1-$9 each message's columns ($5, the tool calls, as JSON text: an array of
-- arrays would be one two-dimensional array); $10, $11: the client message id it applies (null:
-- none) and the seq its events start at, marked started in the same transaction (a claim
-- is started exactly when its message is stored). $12 false: commit without waiting for
-- the WAL flush (an event of each message's turn commits after it and flushes it; see
-- begin_turn).
with given as (
    select *
    from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::int[], $8::text[], $9::int[], $10::text[], $11::bigint[])
        with ordinality
        as m(session_id, role, content, name, tool_calls, tool_call_id, tokens, reasoning,
             reasoning_tokens, applies, first_seq, n)
), started as (
    update orchestrator.client_messages c set started = true, first_seq = m.first_seq
    from given m
    where m.applies is not null and c.session_id = m.session_id
      and c.client_message_id = m.applies
), flushing as (
    select set_config('synchronous_commit', case when $12::bool then 'on' else 'off' end, true)
), inserted as (
    insert into orchestrator.messages
        (session_id, role, content, name, tool_calls, tool_call_id, tokens, reasoning,
         reasoning_tokens)
    select session_id, role, content, name, tool_calls::jsonb, tool_call_id, tokens, reasoning,
           reasoning_tokens
    from given
    order by n
    returning 1
), touched as (
    update orchestrator.sessions s set last_activity = now()
    from (select distinct session_id from given) m
    where s.session_id = m.session_id
)
select count(*) from inserted, flushing;

-- name: history
select id, role, content, name, tool_calls, tool_call_id, created_at, tokens, reasoning,
       reasoning_tokens
from orchestrator.messages
where session_id = $1
order by id;

-- name: context
-- What a model call reads (the function's comment, migration 0017, says what).
select * from orchestrator.turn_context($1) order by id;

-- name: add_summary
insert into orchestrator.summaries
    (session_id, covers_from, covers_to, messages, content, tokens)
values ($1, $2, $3, $4, $5, $6);

-- name: summaries
select covers_from, covers_to, messages, content, tokens
from orchestrator.summaries
where session_id = $1
order by id;

-- name: last_seqs
select session_id, max(seq) as seq from orchestrator.events
where session_id = any($1::text[])
group by session_id;

-- name: append_events
-- Rows of any sessions in one statement (the group commit); one notification per session
-- reaches the replicas whose clients watch it (sent at commit).
with appended as (
    insert into orchestrator.events (session_id, seq, type, event)
    select * from unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[])
    returning session_id, seq
)
select pg_notify('codelab_events', session_id || ' ' || max(seq))
from appended
group by session_id;

-- name: append_events_quietly
-- append_events while no other replica is alive to be told (session/presence.py).
insert into orchestrator.events (session_id, seq, type, event)
select * from unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[]);

-- name: append_events_with_calls
-- append_events with tool calls' state changes in the same commit ($5 sessions, $6 call ids,
-- $7 states, $8 validated arguments, null: kept): a call is dispatched by the commit of the
-- tool_call event that sends it, so neither is ever committed without the other. $9: notify.
with appended as (
    insert into orchestrator.events (session_id, seq, type, event)
    select * from unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[])
    returning session_id, seq
), changed as (
    update orchestrator.tool_calls c
    set state = u.state, arguments = coalesce(u.arguments, c.arguments), updated_at = now()
    from unnest($5::text[], $6::text[], $7::text[], $8::jsonb[])
        as u(session_id, call_id, state, arguments)
    where c.call_id = u.call_id and c.session_id = u.session_id
)
select pg_notify('codelab_events', session_id || ' ' || max(seq))
from appended
where $9::bool
group by session_id;

-- name: events_after
select seq, event from orchestrator.events
where session_id = $1 and seq > $2
order by seq
limit $3;

-- name: upsert_template
-- A new version only when the definition changed.
insert into orchestrator.agent_templates (name, version, definition)
select $1, coalesce(max(version), 0) + 1, $2::jsonb
from orchestrator.agent_templates
where name = $1
having coalesce((
    select definition = $2::jsonb from orchestrator.agent_templates
    where name = $1 order by version desc limit 1
), false) = false;

-- name: latest_templates
select distinct on (name) name, version, definition
from orchestrator.agent_templates
where active
order by name, version desc;

-- name: session_changes
-- Session rows' changes in one statement, one row per session ($1 sessions; each session
-- once), each change optional: an agent switch and its record ($2-$6: from, to, reason,
-- confidence, method; to null: none), a template version pin ($7 agent, $8 version; null:
-- none), a model call's tool-schema token counts ($9, $10; zero: none). $11 false:
-- committed without waiting for the WAL flush, when an event of the same turn commits after
-- it and flushes it (see begin_turn).
with no_flush as (
    select set_config('synchronous_commit', case when $11::bool then 'on' else 'off' end, true)
        as setting
), c as (
    select *
    from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::text[], $8::int[], $9::int[], $10::int[])
        as c(session_id, from_agent, to_agent, reason, confidence, method, pin_agent,
             pin_version, offered, everything)
), s as (
    update orchestrator.sessions x
    set current_agent = coalesce(c.to_agent, x.current_agent),
        switch_count = x.switch_count + (c.to_agent is not null)::int,
        last_switch_at = case when c.to_agent is null then x.last_switch_at else now() end,
        agent_versions = case
            when c.pin_agent is null then x.agent_versions
            else x.agent_versions || jsonb_build_object(c.pin_agent, c.pin_version)
        end,
        tool_tokens_offered = x.tool_tokens_offered + c.offered,
        tool_tokens_all = x.tool_tokens_all + c.everything
    from c
    where x.session_id = c.session_id and (select setting from no_flush) is not null
)
insert into orchestrator.agent_switches (session_id, from_agent, to_agent, reason, confidence, method)
select c.session_id, c.from_agent, c.to_agent, c.reason, c.confidence, c.method
from c, no_flush
where c.to_agent is not null;

-- name: session_agent
select current_agent, switch_count, last_switch_at
from orchestrator.sessions where session_id = $1;

-- name: soft_delete_session
update orchestrator.sessions set deleted_at = now()
where session_id = $1 and deleted_at is null and ($2 = '' or user_id = $2)
returning session_id;

-- name: propose_calls
-- The model's answer that calls tools ($2 text, $3 agent, $4 tool_calls, $5 tokens, $6
-- reasoning, $7 its tokens) and the calls it proposes ($8 ids, $9 tools, $10 raw arguments),
-- in one commit, in the answer's order; each belongs to the step of the session's running
-- plan, when one runs (returned with each call).
with plan as (
    select plan_id, steps -> current_step ->> 'id' as step_id
    from orchestrator.plans
    where session_id = $1 and status = 'running'
    order by created_at desc
    limit 1
), inserted as (
    insert into orchestrator.messages
        (session_id, role, content, name, tool_calls, tokens, reasoning, reasoning_tokens)
    values ($1, 'assistant', $2, $3, $4, $5, $6, $7)
), touched as (
    update orchestrator.sessions set last_activity = now() where session_id = $1
)
insert into orchestrator.tool_calls
    (call_id, session_id, agent, tool_name, arguments, executor, state, plan_id, step_id)
select c.call_id, $1, $3, c.tool_name, c.arguments, '', 'proposed',
       (select plan_id from plan), (select step_id from plan)
from unnest($8::text[], $9::text[], $10::jsonb[]) with ordinality
    as c(call_id, tool_name, arguments, n)
order by c.n
on conflict (call_id) do nothing
returning call_id, plan_id, step_id;

-- name: next_open_call
select call_id, session_id, agent, tool_name, arguments, executor, state, requires_approval,
       reason, plan_id, step_id
from orchestrator.tool_calls
where session_id = $1
  and state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
order by position
limit 1;

-- name: get_call
select call_id, session_id, agent, tool_name, arguments, executor, state, requires_approval,
       reason, plan_id, step_id
from orchestrator.tool_calls
where call_id = $1 and session_id = $2;

-- name: complete_call
-- A call's outcome, the next open call and, when asked, what the next model call reads: the
-- function's comment (migration 0018) says what.
select * from orchestrator.finish_call($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

-- name: set_call_state
update orchestrator.tool_calls
set state = $3, arguments = coalesce($4, arguments), reason = coalesce($5, reason),
    requires_approval = coalesce($6, requires_approval), result = coalesce($7, result),
    updated_at = now()
where call_id = $1 and session_id = $2
returning call_id;

-- name: open_calls
select call_id, session_id, agent, tool_name, arguments, executor, state, requires_approval,
       reason, plan_id, step_id
from orchestrator.tool_calls
where session_id = $1
  and state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
order by position;

-- name: create_plan
insert into orchestrator.plans
    (plan_id, session_id, approval_request_id, call_id, planner, goal, steps, status)
values ($1, $2, $3, $4, $5, $6, $7, 'awaiting_approval');

-- name: get_plan_by_request
select plan_id, session_id, approval_request_id, call_id, planner, goal, steps, status,
       current_step, created_at
from orchestrator.plans
where approval_request_id = $1 and session_id = $2;

-- name: running_plan
select plan_id, session_id, approval_request_id, call_id, planner, goal, steps, status,
       current_step, created_at
from orchestrator.plans
where session_id = $1 and status = 'running'
order by created_at desc
limit 1;

-- name: pending_plans
select plan_id, session_id, approval_request_id, call_id, planner, goal, steps, status,
       current_step, created_at
from orchestrator.plans
where session_id = $1 and status = 'awaiting_approval'
order by created_at;

-- name: update_plan
update orchestrator.plans
set status = $2, steps = $3, current_step = $4, updated_at = now()
where plan_id = $1;

-- name: event_stats
select (select count(*) from orchestrator.events) as total_events,
       (select count(*) from orchestrator.sessions) as sessions,
       (select count(*) from orchestrator.sessions where deleted_at is null
           and last_activity > now() - interval '1 hour') as active_sessions,
       (select count(*) from orchestrator.agent_switches) as agent_switches;

-- name: events_by_type
select type, count(*) as n from orchestrator.events group by type;

-- name: set_turn_state
update orchestrator.sessions set turn_state = $2 where session_id = $1;

-- name: interrupted_turns
select session_id from orchestrator.sessions
where turn_state = 'running' and deleted_at is null;

-- name: set_busy_policy
update orchestrator.sessions set busy_policy = $2 where session_id = $1;

-- name: post_inbox
with posted as (
    insert into orchestrator.inbox (session_id, user_id, message) values ($1, $2, $3)
    returning id
)
select pg_notify('codelab_inbox', $1), (select id from posted);

-- name: take_inbox
delete from orchestrator.inbox
where id in (
    select id from orchestrator.inbox where session_id = $1 order by id limit 100
)
returning id, user_id, message;

-- name: inbox_sessions
select distinct session_id from orchestrator.inbox;

-- name: purge_deleted
with doomed as (
    select session_id from orchestrator.sessions
    where deleted_at is not null and deleted_at < now() - ($1::float8 * interval '1 day')
), e as (delete from orchestrator.events where session_id in (select session_id from doomed)),
   m as (delete from orchestrator.messages where session_id in (select session_id from doomed)),
   su as (delete from orchestrator.summaries
          where session_id in (select session_id from doomed)),
   t as (delete from orchestrator.tool_calls where session_id in (select session_id from doomed)),
   p as (delete from orchestrator.plans where session_id in (select session_id from doomed)),
   w as (delete from orchestrator.agent_switches
         where session_id in (select session_id from doomed)),
   i as (delete from orchestrator.inbox where session_id in (select session_id from doomed)),
   so as (delete from orchestrator.sources where session_id in (select session_id from doomed)),
   ar as (delete from orchestrator.artifacts where session_id in (select session_id from doomed)),
   c as (delete from orchestrator.client_messages
         where session_id in (select session_id from doomed)),
   -- Foreign keys are checked at the end of the statement, after the deletes above.
   s as (delete from orchestrator.sessions where session_id in (select session_id from doomed))
select count(*) from doomed;

-- name: create_child_session
insert into orchestrator.sessions
    (session_id, user_id, current_agent, parent_session_id, parent_call_id)
values ($1, $2, $3, $4, $5)
on conflict (session_id) do nothing;

-- name: session_parent
select parent_session_id, parent_call_id from orchestrator.sessions where session_id = $1;

-- name: find_call_in_tree
select c.call_id, c.session_id, c.agent, c.tool_name, c.arguments, c.executor, c.state,
       c.requires_approval, c.reason, c.plan_id, c.step_id
from orchestrator.tool_calls c
join orchestrator.sessions s on s.session_id = c.session_id
where c.call_id = $1 and (c.session_id = $2 or s.parent_session_id = $2);

-- name: child_sessions
select session_id from orchestrator.sessions where parent_session_id = $1;

-- name: last_event_type
select type from orchestrator.events where session_id = $1 order by seq desc limit 1;

-- name: session_sources
select call_id, kind, locator, created_at from orchestrator.sources
where session_id = $1 order by id;

-- name: session_artifacts
select call_id, kind, path, bytes, created_at from orchestrator.artifacts
where session_id = $1 order by id;

-- name: session_executions
-- The arguments let a reconnecting IDE run a call that was dispatched while it was away.
select execution_id, agent, tool_name, arguments, state, plan_id, step_id, started_at,
       finished_at
from orchestrator.tool_executions
where session_id = $1 order by started_at;

-- name: begin_turn
-- A message starts being handled, in one round trip: the turn is running; when the message
-- starts a task ($2) the session moves to $3 (RESEARCHING) if its state is one of $4 (the
-- state machine's sources); and what the turn needs: the session row, whether tool calls
-- (its own or a delegate's) are still open, whether a plan is running.
-- $5: a client message id not claimed yet (null: none, or claimed already), claimed here
-- with kind $6; the turn begins only when this delivery is to be applied: it claimed the
-- id, or an earlier claim never started and is not live in this process ($7: it is). Else
-- nothing changes and the row says so (applies false, the earlier claim's first_seq).
-- $8: the call a tool result answers (null: none), read as `find_call_in_tree` reads it.
-- $9: also read what the turn's first model call reads (`turn_context`, with this
-- statement's snapshot: the turn's own writes come after it), one array per column.
-- $10: a user message's text (null: none), stored here with its token count $11 when the
-- turn begins with nothing open (no open call, no running plan: else the caller stores it
-- once they are closed, after their answers); the claim $12 it carries out is marked started
-- at seq $13 in the same commit, as add_message marks it. The context read cannot see it
-- (one snapshot), so the history does not hold it twice. `stored` says whether it was.
-- $14: the agent the message goes to whatever the session holds (the one it names, or
-- single-agent mode's), at version $15: when the message is stored here (nothing runs
-- between this statement and its routing), the session switches to it (reason $16,
-- confidence $17, method $18; recorded in agent_switches) unless it is current, and pins
-- that version unless the task has one. `switched_from` names the agent switched from.
-- Committed without waiting for the WAL flush (synchronous_commit off for this statement's
-- transaction only): nothing of the turn reaches a client before an event commits, and that
-- commit flushes the WAL up to and including this one (see docs/decisions.md).
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
), open_work as (
    -- The session's own calls and its delegates' apart: each check an index finds (one
    -- `in (...)` over both reads every session's calls).
    select exists (
               select 1 from orchestrator.tool_calls c
               where c.session_id = $1
                 and c.state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
           ) or exists (
               select 1 from orchestrator.sessions k
               join orchestrator.tool_calls c on c.session_id = k.session_id
               where k.parent_session_id = $1
                 and c.state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
           ) as calls,
           exists (
               select 1 from orchestrator.plans p
               where p.session_id = $1 and p.status = 'running'
           ) as plan
), storing as (
    select $10::text is not null and not w.calls and not w.plan
           and exists (select 1 from orchestrator.sessions s
                       where s.session_id = $1 and s.deleted_at is null) as yes,
           $12::text is not null and $12::text = $5::text as own_claim
    from open_work w
), claimed as (
    -- A claim made here that its stored message carries out is started as it is made (a
    -- row this statement inserts cannot be updated by it).
    insert into orchestrator.client_messages
        (session_id, client_message_id, kind, started, first_seq)
    select $1, $5::text, $6, t.yes and t.own_claim,
           case when t.yes and t.own_claim then $13::bigint end
    from no_flush, storing t where $5::text is not null
    on conflict (session_id, client_message_id) do nothing
    returning 1
), earlier as (
    select first_seq, started from orchestrator.client_messages
    where $5::text is not null and session_id = $1 and client_message_id = $5::text
      and not exists (select 1 from claimed)
), applies as (
    select $5::text is null or exists (select 1 from claimed)
           or not ($7::bool or coalesce((select started from earlier), false)) as yes
), previous as (
    select session_id, state, current_agent, agent_versions from orchestrator.sessions
    where session_id = $1 and (select yes from applies)
    for update
), ahead as (
    select p.current_agent as from_agent, p.current_agent <> $14::text as switch,
           not (p.agent_versions ? $14::text) as pin
    from previous p, storing t
    where $14::text is not null and t.yes
), moved as (
    update orchestrator.sessions s
    set turn_state = 'running',
        state = case when $2 and previous.state = any($4::text[]) then $3 else s.state end,
        started_at = case when $2 and previous.state = any($4::text[])
                          then coalesce(s.started_at, now()) else s.started_at end,
        finished_at = case when $2 and previous.state = any($4::text[]) then null
                           else s.finished_at end,
        last_activity = case when (select yes from storing) then now() else s.last_activity end,
        current_agent = case when a.switch then $14::text else s.current_agent end,
        switch_count = s.switch_count + coalesce(a.switch, false)::int,
        last_switch_at = case when a.switch then now() else s.last_switch_at end,
        agent_versions = case
            when a.pin then s.agent_versions || jsonb_build_object($14::text, $15::int)
            else s.agent_versions
        end
    from previous left join ahead a on true
    where s.session_id = previous.session_id
    returning s.*
), switched as (
    insert into orchestrator.agent_switches
        (session_id, from_agent, to_agent, reason, confidence, method)
    select $1, a.from_agent, $14::text, $16::text, $17::text, $18::text
    from ahead a, moved
    where a.switch
    returning from_agent
), stored as (
    insert into orchestrator.messages (session_id, role, content, tokens)
    select m.session_id, 'user', $10::text, $11::int
    from moved m, storing t
    where t.yes
    returning id
), marked as (
    -- A claim made before this statement (or an earlier delivery's, re-applied).
    update orchestrator.client_messages set started = true, first_seq = $13::bigint
    where $12::text is not null and session_id = $1 and client_message_id = $12::text
      and exists (select 1 from stored) and not exists (select 1 from claimed)
)
select (select yes from applies) as applies, (select first_seq from earlier) as earlier_seq,
       m.session_id, m.user_id, m.title, m.system_prompt, m.current_agent,
       m.created_at, m.last_activity, m.deleted_at, m.switch_count, m.last_switch_at,
       m.busy_policy, m.turn_state, m.tool_tokens_offered, m.tool_tokens_all,
       m.agent_versions, m.clarifications_used, m.searches_used, 0 as message_count, m.parent_session_id, m.parent_call_id,
       (select calls from open_work) as open_calls,
       (select plan from open_work) as running_plan,
       exists (select 1 from stored) as stored,
       (select from_agent from switched) as switched_from,
       (select pin from ahead) as pinned_ahead,
       (select jsonb_build_object(
                   'call_id', c.call_id, 'session_id', c.session_id, 'agent', c.agent,
                   'tool_name', c.tool_name, 'arguments', c.arguments, 'executor', c.executor,
                   'state', c.state, 'requires_approval', c.requires_approval,
                   'reason', c.reason, 'plan_id', c.plan_id, 'step_id', c.step_id)
        from orchestrator.tool_calls c
        join orchestrator.sessions k on k.session_id = c.session_id
        where $8::text is not null and c.call_id = $8
          and (c.session_id = $1 or k.parent_session_id = $1)) as call,
       ctx.*
from no_flush left join moved m on true
-- The context a column at a time (one array of each of turn_context's columns), not one
-- array of its rows: asyncpg decodes an array of records element by element and field by
-- field, ~12 ms more for 1,000 messages on a 2-core box than the same values as arrays of
-- text, integers and timestamps (docs/decisions.md). All null when nothing was read.
left join lateral (
    select array_agg(t.id order by t.id) as ctx_id,
           array_agg(t.role order by t.id) as ctx_role,
           array_agg(t.content order by t.id) as ctx_content,
           array_agg(t.name order by t.id) as ctx_name,
           array_agg(t.tool_calls order by t.id) as ctx_tool_calls,
           array_agg(t.tool_call_id order by t.id) as ctx_tool_call_id,
           array_agg(t.created_at order by t.id) as ctx_created_at,
           array_agg(t.tokens order by t.id) as ctx_tokens,
           array_agg(t.reasoning order by t.id) as ctx_reasoning,
           array_agg(t.reasoning_tokens order by t.id) as ctx_reasoning_tokens,
           array_agg(t.covers_from order by t.id) as ctx_covers_from,
           array_agg(t.covered order by t.id) as ctx_covered,
           array_agg(t.handover order by t.id) as ctx_handover
    from orchestrator.turn_context($1) t
    where $9::bool and m.session_id is not null
) ctx on true;

-- name: end_turns
-- Messages are handled (one row per session: $1 sessions, the others each session's): the
-- turn is idle, and the session moves to $2 when it may come from its current state ($3:
-- the allowed sources, comma-separated; $2 null: no move). $4: the target is terminal: the
-- task is over and its pinned template versions are let go. $5, $6: tool-schema token
-- counts (offered, all) of the message's model calls that were not counted yet.
-- Committed without waiting for the WAL flush: it follows the turn's `done`, whose commit
-- was flushed; the next commit flushes this one. A Postgres crash in between leaves the turn
-- `running` with `done` last in its log, which the next owner sets idle without a word.
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
), ended as (
    select e.session_id, e.move_to, string_to_array(e.sources, ',') as sources, e.terminal,
           e.offered, e.everything
    from unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::int[], $6::int[])
        as e(session_id, move_to, sources, terminal, offered, everything)
)
update orchestrator.sessions s
set turn_state = 'idle',
    tool_tokens_offered = s.tool_tokens_offered + e.offered,
    tool_tokens_all = s.tool_tokens_all + e.everything,
    agent_versions = case when e.terminal then '{}'::jsonb else s.agent_versions end,
    clarifications_used = case when e.terminal then 0 else s.clarifications_used end,
    searches_used = case when e.terminal then 0 else s.searches_used end,
    state = case when e.move_to is not null and s.state = any(e.sources) then e.move_to
                 else s.state end,
    finished_at = case when e.move_to is null or not (s.state = any(e.sources)) then s.finished_at
                       when not e.terminal then null
                       when s.state = e.move_to then s.finished_at
                       else now() end
from no_flush, ended e
where s.session_id = e.session_id;

-- name: reviewed_patches
-- The patches the person kept in this session's patch reviews, newest first.
select result ->> 'reviewed_patch' as patch
from orchestrator.tool_calls
where session_id = $1 and tool_name = 'apply_patch_review' and state = 'completed'
  and result ? 'reviewed_patch'
order by position desc
limit 20;

-- name: set_context_metadata
-- Merge $2 (a JSON object) into the session's context metadata.
update orchestrator.sessions
set context_metadata = context_metadata || $2::jsonb
where session_id = $1;

-- name: spend_budget
-- One more clarification ($2) or search ($3) of the session's task.
update orchestrator.sessions
set clarifications_used = clarifications_used + $2,
    searches_used = searches_used + $3
where session_id = $1;

-- name: claim_client_message
-- One row: fresh (true) when this call claimed the id, else the earlier claim's state.
-- Committed without waiting for the WAL flush: the message's first effect (its events, its
-- rows) commits after it and flushes it; a crash before that loses a claim of a message
-- that was never applied, so a resend is applied, as it should be (see begin_turn).
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
), claimed as (
    insert into orchestrator.client_messages (session_id, client_message_id, kind)
    select $1, $2, $3 from no_flush
    on conflict (session_id, client_message_id) do nothing
    returning first_seq, started, true as fresh
)
select first_seq, started, fresh from claimed
union all
select first_seq, started, false from orchestrator.client_messages
where session_id = $1 and client_message_id = $2 and not exists (select 1 from claimed);

-- name: start_client_message
-- Without waiting for the flush, as the claim (the message's events flush it).
update orchestrator.client_messages set started = true, first_seq = $3
from (select set_config('synchronous_commit', 'off', true) as setting) no_flush
where session_id = $1 and client_message_id = $2;

-- name: forget_client_message
delete from orchestrator.client_messages where session_id = $1 and client_message_id = $2;

-- name: overdue_calls
-- Dispatched calls waiting longer than $1 seconds (the shortest tool timeout), with how long.
select session_id, call_id, tool_name, extract(epoch from now() - updated_at)::float8 as waited
from orchestrator.tool_calls
where state = 'dispatched' and updated_at < now() - make_interval(secs => $1)
order by updated_at
limit 500;
