-- name: save_source
-- A new or changed definition (re-registering a removed source reactivates it).
insert into orchestrator.tool_sources (name, definition)
values ($1, $2)
on conflict (name) do update
set definition = excluded.definition, active = true, updated_at = now()
returning name, definition, created_at, updated_at;

-- name: active_sources
select name, definition, created_at, updated_at
from orchestrator.tool_sources
where active
order by name;

-- name: remove_source
update orchestrator.tool_sources set active = false, updated_at = now()
where name = $1 and active
returning name;
