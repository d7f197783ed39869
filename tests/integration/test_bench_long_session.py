"""The bench's long session is stored as the runtime stores one: the resumed turn's budget
check sums stored counts (the long-session row measures that, not a re-count)."""

from __future__ import annotations

from asyncpg import Pool

from bench.persistence import write_long_session
from services.orchestrator.state.store import SessionStore, StoredMessage


async def test_the_long_sessions_messages_carry_the_runtimes_counts(
    pool: Pool, database_url: str
) -> None:
    await write_long_session(database_url, "long-bench", 6, "coder")
    store = SessionStore(pool)
    context = await store.context("long-bench")
    assert [m.role for m in context] == ["user", "assistant"] * 3

    # The same text written through the runtime's store gets the same count.
    await store.attach("written", "", "coder")
    for message in context:
        await store.add_message("written", StoredMessage(message.role, message.content))
    written = await store.context("written")
    assert [m.tokens for m in context] == [m.tokens for m in written]
    assert all(m.tokens > 0 for m in context)
