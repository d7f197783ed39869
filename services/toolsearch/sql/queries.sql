-- name: catalog_version
select version from toolsearch.catalog_state;

-- name: bump_catalog_version
-- Listeners (version_watch.py) hear of the change when the bump commits.
with bumped as (
    update toolsearch.catalog_state set version = version + 1 returning version
)
select version, pg_notify('toolsearch_catalog', version::text) from bumped;

-- name: lock_catalog
-- Writers queue here, so two imports of the same tool never race for a version number.
select pg_advisory_xact_lock(hashtext('toolsearch.catalog'));

-- name: current_tools
-- The current version of each named tool (active or not): what an upsert compares with.
select name, version, description, parameters, executor, tags, active, type, category,
       long_description, risk, deprecated, timeout_seconds, remote_endpoint, embedding_model
from toolsearch.tools
where is_current and name = any($1::text[]);

-- name: active_keys
-- What search serves, by key; ordered so positions in the in-memory index are stable.
-- The search process fetches full rows only for keys it does not hold yet.
select name, version, embedding_model
from toolsearch.tools
where is_current and active
order by name;

-- name: active_rows
-- Current active rows of the named tools with their embedding in pgvector's binary form
-- (2-byte dimensions, 2 unused bytes, big-endian float4s): no text to parse.
select name, version, description, parameters, executor, tags, active, type, category,
       long_description, risk, deprecated, timeout_seconds, remote_endpoint, embedding_model,
       public.vector_send(embedding) as embedding
from toolsearch.tools
where is_current and active and name = any($1::text[]);

-- name: list_tools
-- The parameters as their JSON text: a listing passes them on as they are (listing.py).
select name, version, description, parameters::text as parameters_json, executor, tags, active,
       type, category, long_description, risk, deprecated, timeout_seconds, remote_endpoint
from toolsearch.tools
where is_current and active and (cardinality($1::text[]) = 0 or name = any($1))
order by name;

-- name: retire_current
update toolsearch.tools set is_current = false where is_current and name = any($1::text[]);

-- name: insert_version
insert into toolsearch.tools (
    name, version, description, parameters, executor, tags, active, type, category,
    long_description, risk, deprecated, embedding, embedding_model, is_current, timeout_seconds,
    remote_endpoint
) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::real[]::vector, $14, true, $15,
    $16);

-- name: stale_embeddings
-- Current versions embedded by another model (or never): redone at start.
select name, version, description, parameters, executor, tags, active, type, category,
       long_description, risk, deprecated, timeout_seconds, remote_endpoint
from toolsearch.tools
where is_current and embedding_model is distinct from $1;

-- name: set_embedding
update toolsearch.tools set embedding = $3::real[]::vector, embedding_model = $4
where name = $1 and version = $2;
