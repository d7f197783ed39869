"""A turn reads the ledger of its own session only: an index finds a session's calls, so a
turn's statements cost the same with a few calls in the database or 400,000. (Before
migration 0019 the open-work check and the hand-over's last failure read every session's
calls: a turn's start grew with the table, 4.9 ms at 40,000 calls.)"""

from __future__ import annotations

from typing import Any

import pytest
from asyncpg import Pool

from services.orchestrator.state.store import SessionStore, TurnStart

OTHER_CALLS = 3000
"""Calls of other sessions in the table, a third of them still open."""
OWN_CALLS = 4
READ_LIMIT = 40
"""Rows of ``tool_calls`` a statement may read for a session with ``OWN_CALLS`` calls: each
of its reads looks at that session's calls only, a handful of times over."""


def tool_call_rows(node: dict[str, Any]) -> float:
    """Rows of ``tool_calls`` that a plan's nodes read: returned or filtered out."""
    total = 0.0
    if node.get("Relation Name") == "tool_calls":
        loops = node.get("Actual Loops", 1)
        kept = node.get("Actual Rows", 0)
        dropped = node.get("Rows Removed by Filter", 0) + node.get(
            "Rows Removed by Index Recheck", 0
        )
        total += (kept + dropped) * loops
    return total + sum(tool_call_rows(child) for child in node.get("Plans", ()))


class Explaining:
    """A pool whose ``fetchrow`` also explains the statement, analysed and rolled back, before
    running it; everything else goes to the real pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.plans: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    async def explain(self, query: str, *args: Any) -> dict[str, Any]:
        async with self.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                # A json column: the pool's codec gives the decoded plan.
                plan = await conn.fetchval("explain (analyze, format json) " + query, *args)
            finally:
                await transaction.rollback()
        self.plans.append(plan[0]["Plan"])
        return self.plans[-1]

    async def fetchrow(self, query: str, *args: Any) -> Any:
        await self.explain(query, *args)
        return await self.pool.fetchrow(query, *args)


@pytest.fixture
async def crowded(pool: Pool) -> Pool:
    """Other sessions' calls (a third open), one session ``own`` with ``OWN_CALLS`` calls
    (the last dispatched, one failed), and statistics that say so."""
    await pool.execute(
        "insert into orchestrator.sessions (session_id, user_id)"
        " select 'other-' || g, 'u' from generate_series(1, $1::int / 3) g",
        OTHER_CALLS,
    )
    await pool.execute(
        "insert into orchestrator.tool_calls"
        " (call_id, session_id, agent, tool_name, arguments, executor, state)"
        " select 'other-call-' || g, 'other-' || (g % ($1::int / 3) + 1), 'coder', 'read_file',"
        "        '{}'::jsonb, '', case when g % 3 = 0 then 'dispatched' else 'completed' end"
        " from generate_series(1, $1::int) g",
        OTHER_CALLS,
    )
    await pool.execute(
        "insert into orchestrator.sessions (session_id, user_id) values ('own', 'u')"
    )
    for n, state in enumerate(["completed", "failed", "completed", "dispatched"][:OWN_CALLS]):
        await pool.execute(
            "insert into orchestrator.tool_calls"
            " (call_id, session_id, agent, tool_name, arguments, executor, state, result)"
            " values ($1, 'own', 'coder', 'read_file', '{}'::jsonb, '', $2,"
            "         jsonb_build_object('content', 'outcome ' || $1))",
            f"own-call-{n}",
            state,
        )
    await pool.execute("analyze orchestrator.tool_calls")
    await pool.execute("analyze orchestrator.sessions")
    return pool


async def test_a_user_message_turn_start_reads_only_its_own_sessions_calls(crowded: Pool) -> None:
    explaining = Explaining(crowded)
    start = await SessionStore(explaining).begin_turn(
        "own", "RESEARCHING", ["INITED"], read_context=True
    )
    assert isinstance(start, TurnStart)
    assert start.open_calls  # own-call-3 is dispatched: the check still finds it
    assert start.context is not None
    _, handover = start.context
    assert handover["last_error"] == "outcome own-call-1"  # the failed call, read by session
    [plan] = explaining.plans
    assert tool_call_rows(plan) <= READ_LIMIT


async def test_a_tool_result_turn_start_reads_only_its_own_sessions_calls(crowded: Pool) -> None:
    explaining = Explaining(crowded)
    start = await SessionStore(explaining).begin_turn("own", None, [], call_id="own-call-3")
    assert isinstance(start, TurnStart)
    assert start.call is not None and start.call["state"] == "dispatched"
    [plan] = explaining.plans
    assert tool_call_rows(plan) <= READ_LIMIT


async def test_a_session_without_open_calls_is_told_so_by_its_own_rows(crowded: Pool) -> None:
    """Other sessions' open calls do not hold a session's turn; its delegate's open call does."""
    await crowded.execute(
        "insert into orchestrator.sessions (session_id, user_id) values ('quiet', 'u')"
    )
    explaining = Explaining(crowded)
    start = await SessionStore(explaining).begin_turn("quiet", None, [])
    assert isinstance(start, TurnStart)
    assert not start.open_calls
    [plan] = explaining.plans
    assert tool_call_rows(plan) <= READ_LIMIT
    await crowded.execute(
        "insert into orchestrator.sessions (session_id, user_id, parent_session_id)"
        " values ('quiet-child', 'u', 'quiet')"
    )
    await crowded.execute(
        "insert into orchestrator.tool_calls"
        " (call_id, session_id, agent, tool_name, arguments, executor, state)"
        " values ('child-call', 'quiet-child', 'coder', 'read_file', '{}'::jsonb, '', 'dispatched')"
    )
    again = await SessionStore(crowded).begin_turn("quiet", None, [])
    assert isinstance(again, TurnStart)
    assert again.open_calls  # a delegate's open call keeps the parent's turn waiting


async def test_the_model_calls_context_reads_only_its_own_sessions_calls(crowded: Pool) -> None:
    plan = await Explaining(crowded).explain("select * from orchestrator.turn_context($1)", "own")
    assert tool_call_rows(plan) <= READ_LIMIT
