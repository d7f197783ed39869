"""Streams under faults: a failing reader, an orchestrator that goes away. The IDE is
always told (an error event with the seed's code) and the socket closed cleanly; the
gateway leaves no exception, task or generator behind."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from services.orchestrator.session.runtime import Runtime
from tests.support.mesh import Mesh, running_mesh

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

LEFT_BEHIND = (
    "Task exception was never retrieved",
    "Task was destroyed but it is pending",
    "Exception in ASGI application",
    "was never awaited",
)


@pytest.fixture
async def mesh(database_url: str, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Mesh]:
    caplog.set_level(logging.WARNING)
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running
    left = [r.getMessage() for r in caplog.records if any(s in r.getMessage() for s in LEFT_BEHIND)]
    assert not left, left


async def rest_of(ws: Any) -> tuple[list[dict[str, Any]], int | None]:
    """Every event until the server closes the socket, and the close code."""
    seen: list[dict[str, Any]] = []
    try:
        while True:
            seen.append(json.loads(await ws.recv()))
    except ConnectionClosed as closed:
        return seen, closed.rcvd.code if closed.rcvd else None


async def test_a_failing_reader_ends_the_stream_with_an_error_and_a_clean_close(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Runtime, session_id: str, user_id: str, item: object) -> None:
        raise RuntimeError("a bug in the runtime")

    monkeypatch.setattr(Runtime, "submit", broken)
    async with websockets.connect(mesh.ws_url("reader-fails")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "hi"}))
        seen, code = await rest_of(ws)
    assert [e["error_code"] for e in seen] == ["INTERNAL_ERROR"]
    assert code == 1013


async def test_a_socket_opened_while_the_orchestrator_is_away_is_told_to_retry(
    mesh: Mesh,
) -> None:
    await mesh.servers["orchestrator"].stop(0)
    async with websockets.connect(mesh.ws_url("away")) as ws:
        seen, code = await rest_of(ws)
    assert [e["error_code"] for e in seen] == ["SERVICE_UNAVAILABLE"]
    assert seen[0]["details"]["retry_after_ms"] > 0
    assert code == 1013


async def test_the_orchestrator_going_away_mid_session_closes_the_socket_cleanly(
    mesh: Mesh,
) -> None:
    mesh.scripted.enqueue({"text": "First answer."})
    async with websockets.connect(mesh.ws_url("goes-away")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "hi"}))
        while json.loads(await ws.recv())["type"] != "done":
            pass
        await mesh.servers["orchestrator"].stop(0)
        seen, code = await rest_of(ws)
    assert [e["error_code"] for e in seen] == ["SERVICE_UNAVAILABLE"]
    assert seen[0]["details"]["retry_after_ms"] > 0
    assert code == 1013


async def test_an_sse_message_while_the_orchestrator_is_away_is_told_to_retry(
    mesh: Mesh,
) -> None:
    await mesh.servers["orchestrator"].stop(0)
    async with httpx.AsyncClient(base_url=mesh.gateway_url) as http:
        reply = await http.post(
            "/agent/message/stream", json={"session_id": "sse-away", "message": "hi"}
        )
    if reply.status_code == 503:  # refused before the stream opened
        body = reply.json()
        assert int(reply.headers["retry-after"]) >= 1
    else:  # refused on the stream: an error frame, then done
        frames = [f for f in reply.text.split("\n\n") if f.strip()]
        assert frames[-1].startswith("event: done")
        body = json.loads(frames[-2].split("data: ", 1)[1])
    assert body["error_code"] == "SERVICE_UNAVAILABLE"
    assert body["details"]["retry_after_ms"] > 0
