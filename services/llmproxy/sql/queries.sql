-- name: record_requests
-- Accounting, not a promise to a client: the rows queued since the last write (one per
-- upstream call, written behind it), committed without waiting for the WAL flush (the
-- turn's next flushed commit flushes them; a crash of Postgres may lose the last rows).
-- $11: each call's own start (the write's time would be the same for the whole batch).
with no_flush as (
    select set_config('synchronous_commit', 'off', true) as setting
)
insert into llmproxy.llm_requests
    (session_id, purpose, model, duration_ms, success, error_code,
     prompt_tokens, completion_tokens, with_tools, reasoning_tokens, started_at)
select r.*
from unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::bool[], $6::text[],
            $7::int[], $8::int[], $9::bool[], $10::int[], $11::timestamptz[]) as r, no_flush;

-- name: session_usage
select count(*)::int as total_requests,
       count(*) filter (where success)::int as successful_requests,
       count(*) filter (where not success)::int as failed_requests,
       coalesce(sum(prompt_tokens), 0)::int as prompt_tokens,
       coalesce(sum(completion_tokens), 0)::int as completion_tokens,
       coalesce(avg(duration_ms), 0)::float8 as average_duration_ms,
       count(*) filter (where with_tools)::int as requests_with_tools,
       coalesce(sum(reasoning_tokens), 0)::int as reasoning_tokens
from llmproxy.llm_requests
where session_id = $1;

-- name: total_usage
-- Every session at once; kept apart from session_usage so that one keeps its index plan.
select count(*)::int as total_requests,
       count(*) filter (where success)::int as successful_requests,
       count(*) filter (where not success)::int as failed_requests,
       coalesce(sum(prompt_tokens), 0)::int as prompt_tokens,
       coalesce(sum(completion_tokens), 0)::int as completion_tokens,
       coalesce(avg(duration_ms), 0)::float8 as average_duration_ms,
       count(*) filter (where with_tools)::int as requests_with_tools,
       coalesce(sum(reasoning_tokens), 0)::int as reasoning_tokens
from llmproxy.llm_requests;

-- name: list_usage
-- One row per session, the most recently active first.
select session_id,
       count(*)::int as total_requests,
       count(*) filter (where success)::int as successful_requests,
       count(*) filter (where not success)::int as failed_requests,
       coalesce(sum(prompt_tokens), 0)::int as prompt_tokens,
       coalesce(sum(completion_tokens), 0)::int as completion_tokens,
       coalesce(avg(duration_ms), 0)::float8 as average_duration_ms,
       count(*) filter (where with_tools)::int as requests_with_tools,
       coalesce(sum(reasoning_tokens), 0)::int as reasoning_tokens
from llmproxy.llm_requests
group by session_id
order by max(started_at) desc, session_id
limit $1;
