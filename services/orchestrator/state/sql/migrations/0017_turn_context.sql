-- What a model call reads. First (id -1, role 'handover') the hand-over
-- context the agent now serving the session is told (seed 000), in `handover`: the last
-- switch, the latest failed call among the last five, the files written, the running plan's
-- steps and the client's metadata. Then the latest summary (id 0) and the messages after
-- the ones it covers. The budget check sums `tokens` (and `reasoning_tokens` for a template
-- that sends reasoning back): nothing is re-counted.
-- A function, so that a statement can read it beside other work (`begin_turn` reads it as
-- a turn starts). STABLE: it reads with its caller's snapshot; called in FROM, it is
-- inlined into the caller's plan.
create function turn_context(sid text)
returns table (
    id bigint, role text, content text, name text, tool_calls jsonb, tool_call_id text,
    created_at timestamptz, tokens integer, reasoning text, reasoning_tokens integer,
    covers_from bigint, covered integer, handover jsonb
)
language sql stable
as $$
with summary as (
    select covers_from, covers_to, messages, content, tokens, created_at
    from orchestrator.summaries
    where session_id = turn_context.sid
    order by id desc
    limit 1
)
select -1::bigint as id, 'handover' as role, '' as content, null::text as name,
       null::jsonb as tool_calls, null::text as tool_call_id, now() as created_at, 0 as tokens,
       null::text as reasoning, 0 as reasoning_tokens, null::bigint as covers_from,
       0 as covered,
       jsonb_build_object(
           'last_switch',
           (select jsonb_build_object('from_agent', w.from_agent, 'to_agent', w.to_agent,
                                      'reason', w.reason)
            from orchestrator.agent_switches w where w.session_id = turn_context.sid
            order by w.id desc limit 1),
           'last_error',
           (select r.result ->> 'content'
            from (select c.state, c.result from orchestrator.tool_calls c
                  where c.session_id = turn_context.sid order by c.position desc limit 5) r
            where r.state = 'failed' limit 1),
           'files_modified',
           (select coalesce(jsonb_agg(a.path order by a.path), '[]'::jsonb)
            from (select distinct path from orchestrator.artifacts where session_id = turn_context.sid) a),
           'plan_steps',
           (select p.steps from orchestrator.plans p
            where p.session_id = turn_context.sid and p.status = 'running'
            order by p.created_at desc limit 1),
           'metadata',
           (select s.context_metadata from orchestrator.sessions s where s.session_id = turn_context.sid)
       ) as handover
union all
select 0::bigint, 'summary', content, null::text, null::jsonb, null::text, created_at, tokens,
       null::text, 0, covers_from, messages, null::jsonb
from summary
union all
select id, role, content, name, tool_calls, tool_call_id, created_at, tokens, reasoning,
       reasoning_tokens, null::bigint, 0, null::jsonb
from orchestrator.messages
where session_id = turn_context.sid and id > coalesce((select covers_to from summary), 0)
order by id
$$;
