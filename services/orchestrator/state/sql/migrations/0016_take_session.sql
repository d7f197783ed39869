-- A session's lease and what its last owner left, in one round trip: the advisory lock
-- (session-level, on the caller's lease connection), then whether a turn was running,
-- whether messages wait in its inbox and the last seq of its log. A VOLATILE function
-- takes a fresh snapshot for each statement it runs, so the reads see every commit made
-- before the lock was granted (the last owner commits before it lets go). One statement
-- could not: its snapshot would predate the lock.
create function take_session(
    sid text, out got boolean, out turn_state text, out posted boolean, out last_seq bigint
)
language plpgsql volatile
as $$
begin
    got := pg_try_advisory_lock(hashtextextended(sid, 7));
    posted := false;
    last_seq := 0;
    if not got then
        return;
    end if;
    select s.turn_state into turn_state from orchestrator.sessions s where s.session_id = sid;
    posted := exists (select 1 from orchestrator.inbox i where i.session_id = sid);
    last_seq := coalesce(
        (select max(e.seq) from orchestrator.events e where e.session_id = sid), 0
    );
end
$$;
