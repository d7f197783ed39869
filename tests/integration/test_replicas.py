"""Two orchestrator replicas on one database: one owner per session, hand-over, take-over;
each test runs over plaintext and over mutual TLS."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from clients.python import MeshClient, SessionStream
from codelab.v1 import common_pb2 as pb
from services.common.db import create_pool
from services.orchestrator import server as orchestrator
from tests.support.certs import mesh_tls
from tests.support.mesh import Mesh, running_mesh, wait_serving


@pytest.fixture(params=["plaintext", "mtls"])
async def mesh(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[Mesh]:
    tls = mesh_tls(tmp_path / "certs") if request.param == "mtls" else {}
    async with running_mesh(database_url, multi_agent_mode=False, gateway=False, **tls) as running:
        yield running


def user(text: str) -> pb.ClientMessage:
    return pb.ClientMessage(user_message=pb.UserMessage(content=text, role="user"))


def result(call_id: str, value: Any) -> pb.ClientMessage:
    return pb.ClientMessage(
        tool_result=pb.ToolResult(call_id=call_id, result_json=json.dumps(value))
    )


async def events_until_done(stream: SessionStream) -> list[pb.ServerEvent]:
    async with asyncio.timeout(20):
        return await stream.until_done()


async def test_a_second_replica_relays_to_the_owner_and_takes_over(
    mesh: Mesh, database_url: str
) -> None:
    pool = await create_pool(database_url)
    replica, port = await orchestrator.build(mesh.settings, pool, "127.0.0.1:0")
    await replica.start()
    settings_b = dataclasses.replace(mesh.settings, orchestrator_addr=f"127.0.0.1:{port}")
    client_b = MeshClient.from_settings(settings_b)
    try:
        await wait_serving(client_b)
        mesh.scripted.enqueue(
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
            {"text": "Seen by both."},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "b.py"}}]},
            {"text": "Finished on the survivor."},
        )
        stream_a = await mesh.client.open_stream("shared")
        stream_b = await client_b.open_stream("shared")
        await stream_a.send(user("read a"))  # replica A owns the session from here
        on_a, on_b = await events_until_done(stream_a), await events_until_done(stream_b)
        assert [e.seq for e in on_a] == [e.seq for e in on_b]  # B learns through NOTIFY
        call_id = next(e.tool_call.call_id for e in on_b if e.HasField("tool_call"))

        await stream_b.send(result(call_id, "A"))  # B is not the owner: relayed to A
        relayed = await events_until_done(stream_b)
        assert "".join(e.assistant_message.token for e in relayed) == "Seen by both."
        await events_until_done(stream_a)

        await stream_b.send(user("read b"))
        second = await events_until_done(stream_b)
        pending = next(e.tool_call.call_id for e in second if e.HasField("tool_call"))
        stream_a.close()
        await mesh.servers["orchestrator"].stop(0)  # the owner goes away
        await stream_b.send(result(pending, "B"))  # B takes the session over
        finished = await events_until_done(stream_b)
        assert "".join(e.assistant_message.token for e in finished) == "Finished on the survivor."
        stream_b.close()
    finally:
        await client_b.close()
        await replica.stop(0)
        await pool.close()


async def test_one_owner_at_a_time(mesh: Mesh, database_url: str) -> None:
    from services.orchestrator.session.ownership import Ownership

    pool = await create_pool(database_url)
    first, second = Ownership(mesh.pool), Ownership(pool)
    try:
        await first.start()
        await second.start()
        assert await first.take("s-lease") is not None
        assert await second.take("s-lease") is None
        await first.release("s-lease")
        assert await second.take("s-lease") is not None
        assert await first.take("s-lease") is None
    finally:
        await first.close()
        await second.close()
        await pool.close()
