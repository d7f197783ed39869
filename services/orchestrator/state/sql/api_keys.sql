-- name: check_key
select user_id, key_sha256, revoked_at from orchestrator.api_keys where key_sha256 = $1;

-- name: seed_key
insert into orchestrator.api_keys (key_id, key_sha256, user_id, prefix, source)
values ($1, $2, $3, $4, 'env')
on conflict do nothing
returning key_id;

-- name: create_key
insert into orchestrator.api_keys (key_id, key_sha256, user_id, label, prefix, source)
values ($1, $2, $3, $4, $5, 'admin')
returning key_id, user_id, label, prefix, source, created_at, revoked_at;

-- name: list_keys
-- Every key ($2: revoked ones too), of one user when $1 is not empty, oldest first.
select key_id, user_id, label, prefix, source, created_at, revoked_at
from orchestrator.api_keys
where ($1 = '' or user_id = $1) and ($2 or revoked_at is null)
order by created_at, key_id;

-- name: revoke_key
-- Revoking twice keeps the first time.
update orchestrator.api_keys set revoked_at = coalesce(revoked_at, now())
where key_id = $1
returning key_id, user_id, label, prefix, source, created_at, revoked_at;
