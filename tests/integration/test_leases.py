"""When a replica takes a session and lets it go: at a stream's attach, once however many
ask at the same time, kept while a stream or a worker holds it (real Postgres leases)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import grpc
import pytest

from services.common.db import Pool, create_pool
from services.common.errors import ServiceError
from services.orchestrator.session.leases import Leases
from services.orchestrator.session.ownership import Left, Ownership
from services.orchestrator.state.store import SessionStore
from tests.support.mesh import Mesh, running_mesh
from tests.support.runtime import until


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[Ownership]:
    """Another replica's leases, on connections of its own."""
    pool = await create_pool(database_url)
    ownership = Ownership(pool)
    await ownership.start()
    yield ownership
    await ownership.close()
    await pool.close()


@pytest.fixture
async def ownership(pool: Pool) -> AsyncIterator[Ownership]:
    ownership = Ownership(pool)
    await ownership.start()
    yield ownership
    await ownership.close()


async def free(other: Ownership, sid: str) -> bool:
    """Whether another replica could take ``sid`` now (it lets go again at once)."""
    if await other.take(sid) is None:
        return False
    await other.release(sid)
    return True


def taking(
    ownership: Ownership, recover: Callable[[str], Awaitable[None]]
) -> Callable[[str], Coroutine[Any, Any, bool]]:
    """A replica's take: the lease, then its recovery."""

    async def take(sid: str) -> bool:
        if await ownership.take(sid) is None:
            return False
        await recover(sid)
        return True

    return take


async def eventually(check: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return check()

    await until(holds)


async def held_by_the_mesh(mesh: Mesh, sid: str) -> None:
    """Until someone holds the session's lease, looked up in pg_locks (a probe that takes
    the lock itself would race the take it waits for)."""

    async def taken() -> bool:
        return bool(
            await mesh.pool.fetchval(
                "select exists (select 1 from pg_locks where locktype = 'advisory' and granted"
                " and objsubid = 1"
                " and ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 7))",
                sid,
            )
        )

    await until(taken)


async def let_go(other: Ownership, sid: str) -> None:
    await until(lambda: free(other, sid))


async def test_takes_at_the_same_time_are_one_and_one_release_lets_go(
    ownership: Ownership, other: Ownership
) -> None:
    recovered: list[str] = []

    async def recover(sid: str) -> None:
        await asyncio.sleep(0.05)
        recovered.append(sid)

    leases = Leases(ownership, taking(ownership, recover), lambda sid: False)
    assert await asyncio.gather(*(leases.own("s1") for _ in range(3))) == [True] * 3
    assert recovered == ["s1"]
    assert not await free(other, "s1")
    await leases.let_go("s1")
    assert await free(other, "s1")  # one lock was taken, so one release frees it


async def test_an_owner_asked_during_a_take_waits_for_the_recovery(ownership: Ownership) -> None:
    may_finish = asyncio.Event()

    async def recover(sid: str) -> None:
        await may_finish.wait()

    leases = Leases(ownership, taking(ownership, recover), lambda sid: False)
    first = asyncio.create_task(leases.own("s1"))
    await eventually(lambda: "s1" in ownership.owned)  # the lease is held, recovery runs
    second = asyncio.create_task(leases.own("s1"))
    await asyncio.sleep(0.05)
    assert not second.done()
    may_finish.set()
    assert await first and await second


async def test_a_session_held_by_the_mesh_is_not_taken(
    ownership: Ownership, other: Ownership
) -> None:
    recovered: list[str] = []

    async def recover(sid: str) -> None:
        recovered.append(sid)

    assert await other.take("s1") is not None
    leases = Leases(ownership, taking(ownership, recover), lambda sid: False)
    assert not await leases.own("s1")
    assert recovered == []


async def test_an_attached_stream_holds_the_session_and_a_worker_outlives_it(
    ownership: Ownership, other: Ownership
) -> None:
    async def recover(sid: str) -> None:
        return None

    working: set[str] = set()
    leases = Leases(ownership, taking(ownership, recover), working.__contains__)
    leases.attached("s1")
    leases.attached("s1")  # a second stream of the same session
    await eventually(lambda: "s1" in ownership.owned)
    await leases.detached("s1")
    assert not await free(other, "s1")  # one stream is still attached
    working.add("s1")
    await leases.detached("s1")
    assert not await free(other, "s1")  # its worker runs
    working.clear()
    await leases.let_go("s1")  # the worker ended
    assert await free(other, "s1")


async def test_a_failed_take_at_attach_is_taken_again_by_the_next_message(
    ownership: Ownership,
) -> None:
    attempts: list[str] = []

    async def recover(sid: str) -> None:
        attempts.append(sid)
        if len(attempts) == 1:
            await ownership.release(sid)  # as a lost lease connection would leave it
            raise ServiceError("Postgres away")

    leases = Leases(ownership, taking(ownership, recover), lambda sid: False)
    leases.attached("s1")
    await eventually(lambda: len(attempts) == 1)
    await asyncio.sleep(0.05)
    assert await leases.own("s1")
    assert attempts == ["s1", "s1"]


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False, gateway=False) as running:
        yield running


async def test_a_stream_takes_its_session_at_attach_and_lets_go_when_it_ends(
    mesh: Mesh, other: Ownership
) -> None:
    stream = await mesh.client.open_stream("attached", user_id="u1", title="t")
    await held_by_the_mesh(mesh, "attached")
    assert not await free(other, "attached")
    stream.close()
    await let_go(other, "attached")


async def test_a_refused_attach_lets_the_session_go(mesh: Mesh, other: Ownership) -> None:
    mine = await mesh.client.open_stream("mine", user_id="u1", title="t")
    await asyncio.sleep(0.1)
    mine.close()
    await let_go(other, "mine")
    refused = await mesh.client.open_stream("mine", user_id="intruder")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async with asyncio.timeout(5):
            await refused.until_done()
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    assert await free(other, "mine")  # the error is sent once the lease is let go


async def test_a_take_reads_what_the_last_owner_left_and_nothing_while_another_owns_it(
    pool: Pool, ownership: Ownership, other: Ownership
) -> None:
    store = SessionStore(pool)
    assert await ownership.take("nobody") == Left(None, False, 0)
    await store.attach("taken", "u1", "orchestrator")
    assert await other.take("taken") == Left("idle", False, 0)
    await store.set_turn_state("taken", "running")
    await pool.execute(
        "insert into orchestrator.inbox (session_id, user_id, message) values ('taken', 'u1', '')"
    )
    await store.append_events(["taken", "taken"], [1, 2], ["done", "done"], [b"", b""])
    assert await ownership.take("taken") is None  # the other replica holds it
    assert "taken" not in ownership.owned
    await other.release("taken")
    assert await ownership.take("taken") == Left("running", True, 2)
    assert "taken" in ownership.owned
