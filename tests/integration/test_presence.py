"""Replica presence over real Postgres: a lone replica commits events without notifying
anyone; a replica that joins turns the others' notifications on before it serves, once
the commit each had in flight is committed; a silent holder of a presence lock is waited
for a bounded time, and a listener of an earlier release counts as company."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from services.common.db import Pool, create_pool
from services.common.errors import ServiceError
from services.orchestrator.session.ownership import Ownership
from services.orchestrator.session.presence import SPACE, Presence
from services.orchestrator.state import events
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import CallChange, SessionStore
from tests.support.runtime import until

MARKER = "marker 0"


class Replica:
    """A replica's hub and ownership on a pool of its own."""

    def __init__(self, pool: Pool, store: SessionStore, join_wait: float = 5.0) -> None:
        self.pool = pool
        self.hub = SessionHub(store)
        self.ownership = Ownership(pool, Presence(pool, join_wait))
        self.ownership.presence.hub = self.hub

    async def close(self) -> None:
        await self.hub.close()
        await self.ownership.close()


class GatedStore(SessionStore):
    """The real store; its event commits wait for ``gate`` while it is closed."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = asyncio.Event()

    async def append_events(
        self,
        session_ids: Sequence[str],
        seqs: Sequence[int],
        kinds: Sequence[str],
        events: Sequence[bytes],
        *,
        notify: bool = True,
        changes: Sequence[CallChange] = (),
    ) -> None:
        self.waiting.set()
        await self.gate.wait()
        await super().append_events(
            session_ids, seqs, kinds, events, notify=notify, changes=changes
        )


@pytest.fixture
async def store(pool: Pool) -> GatedStore:
    store = GatedStore(pool)
    await store.attach("s1", "u1", "orchestrator")
    return store


@pytest.fixture
async def first(pool: Pool, store: GatedStore) -> AsyncIterator[Replica]:
    replica = Replica(pool, store)
    await replica.ownership.start()
    yield replica
    await replica.close()


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[asyncio.Queue[str]]:
    """What ``codelab_events`` carries, as a replica's listener hears it."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(database_url)
    await conn.add_listener("codelab_events", lambda *args: heard.put_nowait(args[3]))
    await conn.execute("select 1")  # its last statement: not one of an earlier release
    yield heard
    await conn.close()


async def heard_before_marker(pool: Pool, heard: asyncio.Queue[str]) -> list[str]:
    """Notifications committed before now (notifications arrive in commit order)."""
    await pool.execute("select pg_notify('codelab_events', $1)", MARKER)
    out: list[str] = []
    async with asyncio.timeout(5):
        while (payload := await heard.get()) != MARKER:
            out.append(payload)
    return out


async def started_warning(replica: Replica, caplog: pytest.LogCaptureFixture) -> str:
    """Start ``replica``'s ownership (and its join); what was logged at warning level."""
    with caplog.at_level(logging.WARNING):
        await replica.ownership.start()
    return caplog.text


async def test_a_lone_replica_commits_events_without_notifications(
    first: Replica, pool: Pool, listener: asyncio.Queue[str], store: GatedStore
) -> None:
    assert first.hub.notify is False
    await first.hub.emit("s1", events.done("completed"))
    assert await heard_before_marker(pool, listener) == []
    assert [seq for seq, _ in await store.events_after("s1", 0)] == [1]


async def test_a_joining_replica_turns_notifications_on_before_it_serves(
    first: Replica, pool: Pool, database_url: str, listener: asyncio.Queue[str]
) -> None:
    other_pool = await create_pool(database_url)
    second = Replica(other_pool, SessionStore(other_pool))
    try:
        await second.ownership.start()
        assert first.hub.notify is True  # answered the join: notifies from now on
        assert second.hub.notify is True  # it has company too
        await first.hub.emit("s1", events.done("completed"))
        assert await heard_before_marker(pool, listener) == ["s1 1"]
    finally:
        await second.close()
        await other_pool.close()


async def test_a_join_is_answered_once_the_commit_in_flight_is_committed(
    first: Replica, store: GatedStore, database_url: str, pool: Pool
) -> None:
    store.gate.clear()
    emitted = asyncio.create_task(first.hub.emit("s1", events.done("completed")))
    await store.waiting.wait()  # built quiet, on its way
    other_pool = await create_pool(database_url)
    second = Replica(other_pool, SessionStore(other_pool))
    joining = asyncio.create_task(second.ownership.start())

    async def heard_the_join() -> bool:
        return first.hub.notify

    try:
        await until(heard_the_join)
        assert not joining.done()  # the answer waits for the commit in flight
        store.gate.set()
        async with asyncio.timeout(5):
            await joining
        assert emitted.done()
        assert [seq for seq, _ in await store.events_after("s1", 0)] == [1]
    finally:
        store.gate.set()
        await asyncio.wait([joining, emitted])
        await second.close()
        await other_pool.close()


async def test_a_replica_that_does_not_answer_is_waited_for_a_bounded_time(
    pool: Pool, store: GatedStore, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    silent = await asyncpg.connect(database_url)  # holds a presence lock, never listens
    await silent.execute("select pg_advisory_lock($1, 4242)", SPACE)
    replica = Replica(pool, store, join_wait=0.2)
    try:
        logged = await started_warning(replica, caplog)
        assert replica.hub.notify is True
        assert "replicas did not answer the join" in logged
    finally:
        await replica.close()
        await silent.close()


async def test_a_listener_of_an_earlier_release_counts_as_company(
    pool: Pool, store: GatedStore, database_url: str
) -> None:
    earlier = await asyncpg.connect(database_url)  # no presence lock, listens for events
    await earlier.add_listener("codelab_events", lambda *args: None)
    replica = Replica(pool, store)
    try:
        await replica.ownership.start()
        assert replica.hub.notify is True
    finally:
        await replica.close()
        await earlier.close()
    alone = Replica(pool, store)
    try:
        await alone.ownership.start()
        assert alone.hub.notify is False
    finally:
        await alone.close()


async def test_a_join_that_cannot_be_answered_is_waited_for_a_bounded_time(
    database_url: str, store: GatedStore, pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    closing = await create_pool(database_url)
    answerer = Replica(closing, store)
    await answerer.ownership.start()
    await closing.close()  # its answer cannot be sent
    joiner = Replica(pool, store, join_wait=0.2)
    try:
        logged = await started_warning(joiner, caplog)
        assert answerer.hub.notify is True  # it heard the join all the same
        assert "join not answered" in logged
        assert "replicas did not answer the join" in logged
    finally:
        await joiner.close()
        await answerer.close()


async def test_a_join_that_fails_leaves_the_replica_notifying(
    pool: Pool, store: GatedStore, database_url: str
) -> None:
    replica = Replica(pool, store)
    replica.hub.notify = False
    lease, listener = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    await lease.close()
    try:
        with pytest.raises(ServiceError) as failure:
            await replica.ownership.presence.join(lease, listener)
        assert failure.value.code == "DB_CONNECTION_ERROR"
        assert replica.hub.notify is True
    finally:
        await listener.close()
        await replica.hub.close()
