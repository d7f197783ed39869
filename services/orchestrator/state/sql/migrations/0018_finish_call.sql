-- A call's outcome and what comes of it, in one round trip: the tool message the model reads
-- (`content`, named `tool`, `tokens` estimated), the call's state (a finished one) and
-- result, and what it read or wrote (sources: kinds, locators; artifacts: kinds, paths,
-- bytes; empty arrays for none). Returns the session's next open call (null: none) and, when
-- none is open and `read_context` asks, what the next model call reads (`turn_context`, one
-- array per column, as `begin_turn` returns it: null when not read).
-- A VOLATILE function runs each statement with a fresh snapshot: the read sees the message,
-- the state and the artifacts written just before it (the hand-over context reads the last
-- failed call and the files written), which a single statement's snapshot could not.
create function finish_call(
    sid text, cid text, tool_content text, tool text, tool_tokens integer, new_state text,
    outcome jsonb, source_kinds text[], source_locators text[], artifact_kinds text[],
    artifact_paths text[], artifact_bytes integer[], read_context boolean
)
returns table (
    next_call jsonb, ctx_id bigint[], ctx_role text[], ctx_content text[], ctx_name text[],
    ctx_tool_calls jsonb[], ctx_tool_call_id text[], ctx_created_at timestamptz[],
    ctx_tokens integer[], ctx_reasoning text[], ctx_reasoning_tokens integer[],
    ctx_covers_from bigint[], ctx_covered integer[], ctx_handover jsonb[]
)
language plpgsql volatile
as $$
begin
    insert into orchestrator.messages (session_id, role, content, name, tool_call_id, tokens)
    values (sid, 'tool', tool_content, tool, cid, tool_tokens);
    update orchestrator.sessions s set last_activity = now() where s.session_id = sid;
    insert into orchestrator.sources (session_id, call_id, kind, locator)
    select sid, cid, k.kind, k.locator
    from unnest(source_kinds, source_locators) as k(kind, locator)
    on conflict (call_id, locator) do nothing;
    insert into orchestrator.artifacts (session_id, call_id, kind, path, bytes)
    select sid, cid, a.kind, a.path, a.bytes
    from unnest(artifact_kinds, artifact_paths, artifact_bytes) as a(kind, path, bytes)
    on conflict (call_id, path) do nothing;
    update orchestrator.tool_calls c
    set state = new_state, result = outcome, updated_at = now()
    where c.call_id = cid and c.session_id = sid;
    select jsonb_build_object(
               'call_id', c.call_id, 'session_id', c.session_id, 'agent', c.agent,
               'tool_name', c.tool_name, 'arguments', c.arguments, 'executor', c.executor,
               'state', c.state, 'requires_approval', c.requires_approval,
               'reason', c.reason, 'plan_id', c.plan_id, 'step_id', c.step_id)
    into next_call
    from orchestrator.tool_calls c
    where c.session_id = sid
      and c.state not in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
    order by c.position
    limit 1;
    if next_call is null and read_context then
        select array_agg(t.id order by t.id), array_agg(t.role order by t.id),
               array_agg(t.content order by t.id), array_agg(t.name order by t.id),
               array_agg(t.tool_calls order by t.id), array_agg(t.tool_call_id order by t.id),
               array_agg(t.created_at order by t.id), array_agg(t.tokens order by t.id),
               array_agg(t.reasoning order by t.id),
               array_agg(t.reasoning_tokens order by t.id),
               array_agg(t.covers_from order by t.id), array_agg(t.covered order by t.id),
               array_agg(t.handover order by t.id)
        into ctx_id, ctx_role, ctx_content, ctx_name, ctx_tool_calls, ctx_tool_call_id,
             ctx_created_at, ctx_tokens, ctx_reasoning, ctx_reasoning_tokens,
             ctx_covers_from, ctx_covered, ctx_handover
        from orchestrator.turn_context(sid) t;
    end if;
    return next;
end
$$;
