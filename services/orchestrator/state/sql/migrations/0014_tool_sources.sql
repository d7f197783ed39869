-- Tool sources: MCP servers registered through the admin API, whose tools join the
-- catalog as <source>.<tool>. The definition keeps ${NAME} secret references, never the
-- secrets; a removed source stays as a row (inactive) so re-registering it is visible.
create table tool_sources (
    name text primary key,
    definition jsonb not null,
    active boolean not null default true,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
