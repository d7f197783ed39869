-- The template version each agent of a session's task runs on (seed 003: an instance pins
-- a version; an admin's edit reaches the next task, never one in flight). Emptied when the
-- task ends (completed, failed, cancelled).
alter table sessions
    add column agent_versions jsonb not null default '{}'::jsonb;

-- Seed 000's AgentContext.metadata: what the client tells about the session (user
-- preferences, pending tasks, ...), handed to every agent that takes over.
alter table sessions
    add column context_metadata jsonb not null default '{}'::jsonb;

-- Seed 003's per-task budgets spent so far (execution_policy max_clarifications,
-- max_searches); emptied with agent_versions when the task ends.
alter table sessions
    add column clarifications_used integer not null default 0,
    add column searches_used integer not null default 0;
