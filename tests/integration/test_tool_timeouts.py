"""Seed 001's tool recovery: TOOL_TIMEOUT for an unanswered call, and the tool_call sent
again to an IDE that reconnects while it is unanswered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import websockets

from codelab.v1 import runtime_pb2
from tests.support.ide import Ide, ide, of, text_of
from tests.support.mesh import Mesh, running_mesh

READ = {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]}


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False, tool_timeout=0.5) as running:
        yield running


async def test_an_unanswered_call_times_out_and_the_model_goes_on(mesh: Mesh) -> None:
    mesh.scripted.enqueue(READ, {"text": "Went on without it."})
    async with ide(mesh, "slow-ide") as client:
        asked = await client.say("read a.py")
        call = of(asked, "tool_call")[0]
        assert asked[-1]["status"] == "awaiting_tool_result"
        after = await client.until_done()  # nothing sent: the sweep closes the call
        late = await client.result(call["call_id"], "too late")
    errors = of(after, "error")
    assert [(e["error_code"], e["context"]["call_id"]) for e in errors] == [
        ("TOOL_TIMEOUT", call["call_id"])
    ]
    assert errors[0]["details"]["timeout_seconds"] == 0.5
    assert text_of(after) == "Went on without it."
    assert after[-1]["status"] == "completed"
    assert [e["error_code"] for e in of(late, "error")] == ["TOOL_TIMEOUT"]
    history = await mesh.client.runtime.GetHistory(
        runtime_pb2.GetHistoryRequest(session_id="slow-ide")
    )
    tool_messages = [m.content for m in history.messages if m.role == "tool"]
    assert len(tool_messages) == 1 and "TOOL_TIMEOUT" in tool_messages[0]


@pytest.fixture
async def patient_mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def test_a_reconnecting_ide_gets_the_unanswered_call_again(patient_mesh: Mesh) -> None:
    mesh = patient_mesh
    mesh.scripted.enqueue(READ, {"text": "Read it."})
    async with ide(mesh, "lost-call") as client:
        asked = await client.say("read a.py")
    call = of(asked, "tool_call")[0]
    last = asked[-1]["seq"]  # the IDE saw everything, then lost the call before running it
    url = mesh.ws_url("lost-call", f"last_event_id={last}")
    async with websockets.connect(url) as ws:
        again = Ide(ws, "lost-call")
        resent = json.loads(await ws.recv())
        assert (resent["type"], resent["seq"]) == ("tool_call", 0)
        assert resent["call_id"] == call["call_id"]
        assert resent["arguments"] == call["arguments"]
        answered = await again.result(call["call_id"], "print('a')")
        twice = await again.result(call["call_id"], "print('a')")
    assert text_of(answered) == "Read it."
    assert [e["status"] for e in of(twice, "done")] == ["duplicate"]


async def test_a_fresh_socket_without_last_event_id_gets_no_resend(patient_mesh: Mesh) -> None:
    mesh = patient_mesh
    mesh.scripted.enqueue(READ, {"text": "Done."})
    async with ide(mesh, "no-resend") as client:
        asked = await client.say("read a.py")
    async with ide(mesh, "no-resend") as client:
        answered = await client.result(of(asked, "tool_call")[0]["call_id"], "x")
    assert of(answered, "tool_call") == []
    assert text_of(answered) == "Done."
