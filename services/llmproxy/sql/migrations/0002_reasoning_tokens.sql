-- Reasoning tokens: the part of completion_tokens the model spent reasoning.
alter table llm_requests add column reasoning_tokens integer not null default 0;
