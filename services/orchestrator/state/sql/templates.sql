-- Agent templates, their tools, the instance pool and the session state (seed 003).

-- name: lock_template
-- Writers of one template queue here, so two upserts never race for a version number.
select pg_advisory_xact_lock(hashtext('orchestrator.agent_templates:' || $1));

-- name: template_head
-- The newest version of one template and whether any version is active.
select name, version, definition, active, source, created_at,
       (select bool_or(active) from orchestrator.agent_templates where name = $1) as any_active
from orchestrator.agent_templates
where name = $1
order by version desc
limit 1;

-- name: insert_template
insert into orchestrator.agent_templates (name, version, definition, source)
values ($1, $2, $3::jsonb, $4)
returning name, version, definition, active, source, created_at;

-- name: insert_template_tools
-- $3: every tool the version names ('*' included), $4: the required ones among them.
insert into orchestrator.agent_template_tools (template_name, template_version, tool_name, role)
select $1, $2, t.name, case when t.name = any($4::text[]) then 'required' else 'optional' end
from unnest($3::text[]) as t(name)
on conflict do nothing;

-- name: latest_templates
-- The newest active version of each template; with $1, the newest version of every
-- template, deactivated ones included.
select distinct on (name) name, version, definition, active, source, created_at
from orchestrator.agent_templates
where $1::bool or active
order by name, version desc;

-- name: template_versions
select name, version, definition, active, source, created_at
from orchestrator.agent_templates
where ($1 = '' or name = $1) and ($2::bool or active)
order by name, version desc;

-- name: get_template
-- One version ($2), or the newest one when $2 is null.
select name, version, definition, active, source, created_at
from orchestrator.agent_templates
where name = $1 and ($2::int is null or version = $2)
order by version desc
limit 1;

-- name: active_template_names
select distinct name from orchestrator.agent_templates where active;

-- name: deactivate_template
-- Every version: the registry serves the newest *active* one, so an older version
-- left active would come back.
update orchestrator.agent_templates set active = false
where name = $1 and active
returning version;

-- name: template_tools
select tool_name, role from orchestrator.agent_template_tools
where template_name = $1 and template_version = $2
order by role, tool_name;

-- name: write_instances
-- The instance rows mirror memory (memory rules; instance_rows.py), many in one statement:
-- each instance's latest state ($1-$7: id, template, version, state, session, failures to
-- add, just leased), inserted on its first write, and the sessions just leased ($9-$11:
-- session, instance, version) record which instance and version serve them. Committed
-- without waiting for the WAL flush: a row lost to a crash of Postgres is rewritten when
-- the orchestrator comes back.
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
), written as (
    insert into orchestrator.agent_instances as a
        (instance_id, template_name, template_version, state, session_id, runtime_node,
         failures, last_used_at)
    select r.instance_id, r.template_name, r.template_version, r.state, r.session_id, $8,
           r.failures, case when r.leased then now() end
    from unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::int[],
                $7::bool[])
        as r(instance_id, template_name, template_version, state, session_id, failures, leased)
    where (select setting from no_flush) is not null
    on conflict (instance_id) do update
    set state = excluded.state,
        failures = a.failures + excluded.failures,
        last_used_at = coalesce(excluded.last_used_at, a.last_used_at),
        updated_at = now(),
        -- The session stays visible while it is being cleaned up or when it broke the
        -- instance (cleaning up forgets it in memory).
        session_id = case when excluded.state in ('BUSY', 'RESETTING', 'ERROR')
                          then coalesce(excluded.session_id, a.session_id) end
)
update orchestrator.sessions s
set instance_id = l.instance_id, template_version = l.template_version
from unnest($9::text[], $10::text[], $11::int[]) as l(session_id, instance_id, template_version)
where s.session_id = l.session_id;

-- name: stop_node_instances
update orchestrator.agent_instances
set state = 'STOPPED', session_id = null, updated_at = now()
where runtime_node = $1 and state <> 'STOPPED';

-- name: list_instances
select instance_id, template_name, template_version, state, session_id, runtime_node,
       failures, last_used_at, created_at
from orchestrator.agent_instances
where ($1 = '' or template_name = $1) and ($2::bool or state <> 'STOPPED')
order by template_name, created_at, instance_id;

-- name: get_session_state
select state from orchestrator.sessions where session_id = $1;

-- name: set_session_state
-- Moves only from an allowed source state ($3); returns the previous state, none when
-- refused. $4: the target is terminal.
update orchestrator.sessions s
set state = $2,
    started_at = case when $2 = 'RESEARCHING' then coalesce(s.started_at, now())
                      else s.started_at end,
    finished_at = case when not $4::bool then null
                       when previous.state = $2 then s.finished_at
                       else now() end
from (
    select session_id, state from orchestrator.sessions where session_id = $1 for update
) previous
where s.session_id = previous.session_id and previous.state = any($3::text[])
returning previous.state;

-- name: unembedded_templates
-- Active template versions whose capability text has no vector yet.
select name, version, definition, active, source, created_at
from orchestrator.agent_templates
where active and embedding is null
order by name, version;

-- name: set_template_embedding
update orchestrator.agent_templates
set embedding = $3::text::vector
where name = $1 and version = $2;
