-- The gateway's API keys, by SHA-256 only: a key is shown once, when it is created.
create table api_keys (
    key_id text primary key,
    key_sha256 bytea not null unique,
    user_id text not null,
    label text not null default '',
    prefix text not null default '',
    source text not null check (source in ('env', 'admin')),
    created_at timestamptz not null default now(),
    revoked_at timestamptz
);

create index api_keys_user on api_keys (user_id, created_at);
