-- A session's calls in their order, whatever their state: the hand-over's last failure
-- (`turn_context`), the reviewed patches and a purge read a session's calls, and found them
-- by reading every session's (the partial `tool_calls_open` holds open calls only). So a
-- turn's start grew with the whole ledger: 4.9 ms at 40,000 calls, 22 ms at 400,000.
create index tool_calls_session on tool_calls (session_id, position);
