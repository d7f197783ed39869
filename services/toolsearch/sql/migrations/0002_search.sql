-- Tool search: seed 003's tool model plus one embedding per tool version (pgvector).

-- In public, not in this schema (the runner puts toolsearch first on the search path):
-- other services may want vectors too, and an extension lives in one schema only.
create extension if not exists vector with schema public;

alter table tools
    add column type text not null default 'domain'
        check (type in ('system', 'aux', 'domain', 'meta')),
    add column category text not null default '',
    add column long_description text not null default '',
    add column risk text not null default 'low' check (risk in ('low', 'medium', 'high')),
    add column deprecated boolean not null default false,
    -- Exactly one row per name is current: the one ListTools and search serve.
    add column is_current boolean not null default false,
    -- Computed once per version; the model id says which model made it, so a model
    -- change re-embeds instead of mixing vector spaces.
    add column embedding vector(384),
    add column embedding_model text;

update tools t set is_current = true
where t.version = (select max(version) from tools m where m.name = t.name);

create unique index tools_one_current on tools (name) where is_current;

-- Only current versions are searched; the partial index keeps old versions out of the graph.
create index tools_embedding on tools using hnsw (embedding vector_cosine_ops) where is_current;

-- Bumped by every write that changes what search can return: caches and the in-memory
-- BM25 index are keyed by it, in every toolsearch replica.
create table catalog_state (
    singleton boolean primary key default true check (singleton),
    version bigint not null
);

insert into catalog_state (singleton, version) values (true, 1);
