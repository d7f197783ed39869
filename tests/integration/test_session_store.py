"""The session rows: attaching creates a session on first use (also when two replicas attach
at once); a turn's start commits without a WAL flush and leaves the connection as it was."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from asyncpg import Pool

from services.common.db import create_pool
from services.orchestrator.errors import SessionNotFound
from services.orchestrator.state.store import SessionStore


async def test_an_attach_waiting_on_a_concurrent_creation_sees_the_session(
    pool: Pool, database_url: str
) -> None:
    other = await asyncpg.connect(database_url)
    try:
        # Another replica is creating the session and has not committed yet.
        creating = other.transaction()
        await creating.start()
        await other.execute(
            "insert into orchestrator.sessions (session_id, user_id, current_agent) "
            "values ('raced', 'u1', 'orchestrator')"
        )
        attach = asyncio.create_task(SessionStore(pool).attach("raced", "u1", "orchestrator"))
        await asyncio.sleep(0.2)  # the attach's insert now waits on the row lock
        assert not attach.done()
        await creating.commit()
        await asyncio.wait_for(attach, 10)  # no SessionNotFound: the row is seen
    finally:
        await other.close()


async def test_attaching_to_another_users_session_is_not_found(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("mine", "u1", "orchestrator")
    with pytest.raises(SessionNotFound):
        await store.attach("mine", "u2", "orchestrator")


async def test_the_attach_that_creates_a_session_gives_it_its_title_and_prompt(
    pool: Pool,
) -> None:
    store = SessionStore(pool)
    await store.attach("titled", "u1", "ask", "Fix the build", "Answer briefly.")
    await store.attach("titled", "u1", "coder", "Another title", "Another prompt.")
    row = await store.get_session("titled")
    assert (row.title, row.system_prompt, row.current_agent) == (
        "Fix the build",
        "Answer briefly.",
        "ask",
    )


async def test_a_turn_start_is_visible_and_leaves_the_connection_flushing(
    database_url: str,
) -> None:
    single = await create_pool(database_url, min_size=1, max_size=1)
    try:
        store = SessionStore(single)
        await store.attach("flush", "u1", "orchestrator")  # created without a flush too
        assert await single.fetchval("show synchronous_commit") == "on"
        start = await store.begin_turn("flush", "RESEARCHING", ["INITED"])
        assert start.session.session_id == "flush"
        # The same (only) connection: the statement's setting did not outlive it.
        assert await single.fetchval("show synchronous_commit") == "on"
        row = await single.fetchrow(
            "select turn_state, state from orchestrator.sessions where session_id = 'flush'"
        )
        assert (row["turn_state"], row["state"]) == ("running", "RESEARCHING")
    finally:
        await single.close()


async def test_a_new_owner_reads_the_turn_state_and_whether_messages_wait(pool: Pool) -> None:
    store = SessionStore(pool)
    assert await store.takeover_state("nobody") == (None, False)
    await store.attach("taken", "u1", "orchestrator")
    assert await store.takeover_state("taken") == ("idle", False)
    await store.set_turn_state("taken", "running")
    await pool.execute(
        "insert into orchestrator.inbox (session_id, user_id, message) values ('taken', 'u1', '')"
    )
    assert await store.takeover_state("taken") == ("running", True)
