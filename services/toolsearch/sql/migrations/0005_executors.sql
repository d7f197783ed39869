-- Executors of the orchestrator's port: `plan` (create_plan) and `mcp` (tools of an MCP
-- server) join the IDE, the runtime's system tools, local functions and remote endpoints.
alter table tools drop constraint if exists tools_executor_check;
alter table tools add constraint tools_executor_check
    check (executor in ('ide', 'system', 'plan', 'local', 'remote', 'mcp'));
