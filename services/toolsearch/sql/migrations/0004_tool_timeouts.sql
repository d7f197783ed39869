-- Seconds an IDE may take to answer a call of the tool before TOOL_TIMEOUT (0: the
-- runtime's default).
alter table tools add column timeout_seconds integer not null default 0
    check (timeout_seconds between 0 and 86400);
