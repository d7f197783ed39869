-- name: upsert_builtin
-- A built-in tool gets a new version only when its definition changed.
insert into toolsearch.tools (name, version, description, parameters, executor, tags)
select $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5
from toolsearch.tools
where name = $1
having not exists (
    select 1 from toolsearch.tools t
    where t.name = $1
      and t.version = (select max(version) from toolsearch.tools where name = $1)
      and t.description = $2 and t.parameters = $3::jsonb and t.executor = $4 and t.tags = $5
);

-- name: list_tools
select distinct on (name) name, version, description, parameters, executor, tags, active
from toolsearch.tools
where active and (cardinality($1::text[]) = 0 or name = any($1))
order by name, version desc;

-- name: search_tools
with latest as (
    select distinct on (name) *
    from toolsearch.tools
    where active and (cardinality($3::text[]) = 0 or name = any($3))
    order by name, version desc
), q as (
    select websearch_to_tsquery('english', $1) || websearch_to_tsquery('simple', $1) as query
)
select name, version, description, parameters, executor, tags, active,
       ts_rank_cd(search, q.query) as score
from latest, q
where search @@ q.query
order by score desc, name
limit $2;
