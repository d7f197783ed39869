-- The URL a `remote` tool's calls are POSTed to (empty for every other executor).
alter table tools add column remote_endpoint text not null default '';
