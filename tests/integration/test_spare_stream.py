"""A Stream call opened ahead for the next stream (services/common/spare.py), over a real
orchestrator: taken and used for a turn, replaced, closed when unused, never handed out
once it ended."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from clients.python import MeshClient
from clients.python.client import StreamCall as Call
from codelab.v1 import common_pb2 as pb
from services.common.db import create_pool
from services.common.spare import SpareCall
from services.orchestrator import server as orchestrator
from services.orchestrator.transport import servicer
from tests.support.mesh import Mesh, running_mesh, wait_serving


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, gateway=False, multi_agent_mode=False) as running:
        yield running


def counted(client: MeshClient, opened: list[Call]) -> SpareCall[Call]:
    """A spare over ``client``'s orchestrator that lists every call it opens."""

    def open_call() -> Call:
        call = client.runtime.Stream()
        opened.append(call)
        return call

    return SpareCall(open_call, max_age=0.5, delay=0.01)


async def turn(mesh: Mesh, client: MeshClient, session_id: str, text: str) -> str:
    mesh.scripted.enqueue({"text": text})
    async with asyncio.timeout(15):
        stream = await client.open_stream(session_id)
        async with stream:
            await stream.send(pb.ClientMessage(user_message=pb.UserMessage(content="hi")))
            events = await stream.until_done()
    assert events[-1].done.status == "completed"
    return "".join(e.assistant_message.token for e in events if e.HasField("assistant_message"))


async def test_the_next_take_gets_the_call_opened_ahead_and_a_replacement_follows(
    mesh: Mesh,
) -> None:
    opened: list[Call] = []
    spare = counted(mesh.client, opened)
    try:
        first = spare.take()
        assert first is opened[0]  # nothing was opened ahead yet: a new call
        await asyncio.sleep(0.1)
        assert len(opened) == 2  # the replacement, opened after the delay
        second = spare.take()
        assert second is opened[1]  # the call opened ahead
        assert not second.done()
        first.cancel()
        second.cancel()
    finally:
        spare.close()


async def test_a_spare_not_taken_within_its_age_is_closed_and_none_is_kept(mesh: Mesh) -> None:
    opened: list[Call] = []
    spare = counted(mesh.client, opened)
    try:
        spare.take().cancel()
        await asyncio.sleep(0.1)
        assert len(opened) == 2 and not opened[1].done()
        await asyncio.sleep(0.6)  # past max_age
        assert opened[1].cancelled()
        await asyncio.sleep(0.6)
        assert len(opened) == 2  # nothing opens streams: no spare is kept
        call = spare.take()
        assert call is opened[2]  # a new call, not one opened ahead
        call.cancel()
    finally:
        spare.close()
    await asyncio.sleep(0.1)
    assert len(opened) == 3 and all(call.done() for call in opened)  # closed: none opened


async def test_a_spare_the_orchestrator_ended_is_not_handed_out(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servicer, "ATTACH_TIMEOUT", 0.05)  # a spare waits longer than that
    opened: list[Call] = []
    spare = counted(mesh.client, opened)
    try:
        spare.take().cancel()
        await asyncio.sleep(0.3)
        assert opened[1].done()  # the orchestrator gave up waiting for its attach
        call = spare.take()
        assert call is opened[2]  # a new call, not one opened ahead
        call.cancel()
    finally:
        spare.close()


async def test_streams_over_spares_carry_turns_and_outlive_an_orchestrator_restart(
    mesh: Mesh, database_url: str
) -> None:
    pool = await create_pool(database_url)
    replica, port = await orchestrator.build(mesh.settings, pool, "127.0.0.1:0")
    await replica.start()
    address = f"127.0.0.1:{port}"
    client = MeshClient.from_settings(dataclasses.replace(mesh.settings, orchestrator_addr=address))
    client.keep_spare_stream(delay=0.01)
    try:
        await wait_serving(client)
        assert await turn(mesh, client, "spare-1", "One.") == "One."
        await asyncio.sleep(0.1)  # a spare is open now
        assert await turn(mesh, client, "spare-2", "Two.") == "Two."
        await asyncio.sleep(0.1)
        await replica.stop(0)  # the spare opened ahead dies with it
        replica, _ = await orchestrator.build(mesh.settings, pool, address)
        await replica.start()
        await wait_serving(client)
        assert await turn(mesh, client, "spare-3", "Three.") == "Three."
    finally:
        await client.close()
        await replica.stop(0)
        await pool.close()


async def test_a_call_opened_ahead_has_its_headers_before_anything_is_sent(mesh: Mesh) -> None:
    """The orchestrator answers a new Stream with its headers at once (not with the first
    event): a spare has them before it is taken, off the first token's way."""
    call = mesh.client.runtime.Stream()
    try:
        async with asyncio.timeout(5):
            await call.initial_metadata()
        assert not call.done()  # still waiting for its attach
    finally:
        call.cancel()
