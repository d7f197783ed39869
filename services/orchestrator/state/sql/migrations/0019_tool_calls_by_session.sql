-- A session's calls in their order, whatever their state: the hand-over's last failure
-- (`turn_context`), the reviewed patches and a purge read a session's calls, and found them
-- by reading every session's (the partial `tool_calls_open` holds open calls only). So a
-- turn's start cost grew with the whole ledger: ~2 ms at 40,000 calls.
create index tool_calls_session on tool_calls (session_id, position);
