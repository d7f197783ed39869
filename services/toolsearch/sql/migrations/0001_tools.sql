-- array_to_string is only STABLE in general, but for text[] it cannot change: safe to
-- declare the whole document IMMUTABLE so it can back a generated column.
create function tool_document(name text, description text, tags text[])
returns tsvector language sql immutable parallel safe as $$
    select setweight(to_tsvector('simple', replace(replace(name, '_', ' '), '.', ' ')), 'A')
        || setweight(to_tsvector('english', description), 'B')
        || setweight(to_tsvector('simple', array_to_string(tags, ' ')), 'C')
$$;

-- The tool catalog: one row per (name, version); the newest active version is served.
create table tools (
    name text not null,
    version integer not null,
    description text not null,
    parameters jsonb not null,
    executor text not null check (executor in ('ide', 'system', 'local', 'remote')),
    tags text[] not null default '{}',
    active boolean not null default true,
    created_at timestamptz not null default now(),
    search tsvector generated always as (tool_document(name, description, tags)) stored,
    primary key (name, version)
);

create index tools_search on tools using gin (search);
