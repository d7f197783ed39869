-- TOOL_TIMEOUT: a dispatched call unanswered for its tool's timeout is closed as
-- `timed_out`, a finished state like the others. The sweep finds dispatched calls by
-- when they were dispatched (updated_at) without scanning the ledger.
create index tool_calls_dispatched on tool_calls (updated_at) where state = 'dispatched';

create or replace view tool_executions as
select call_id as execution_id, session_id, agent, tool_name, arguments, executor, state,
       result, plan_id, step_id, created_at as started_at,
       case when state in ('completed', 'failed', 'cancelled', 'rejected', 'expired', 'timed_out')
            then updated_at end as finished_at
from tool_calls;
