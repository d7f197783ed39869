"""The session's row is read once per message: at the turn's start, with the turn's own
writes (``begin_turn``); the loop, routing and executors use that copy."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import websockets

from services.orchestrator.state.store import SessionRow, SessionStore
from tests.support.mesh import running_mesh


async def test_a_turn_with_a_tool_round_trip_never_reads_the_row_again(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: Counter[str] = Counter()
    read = SessionStore.get_session

    async def counted(self: SessionStore, session_id: str, user_id: str = "") -> SessionRow:
        reads[session_id] += 1
        return await read(self, session_id, user_id)

    monkeypatch.setattr(SessionStore, "get_session", counted)
    async with running_mesh(database_url, multi_agent_mode=False) as mesh:
        mesh.scripted.enqueue(
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
            {"text": "It sets x."},
        )
        async with websockets.connect(mesh.ws_url("reads")) as ws:
            await ws.send(json.dumps({"type": "user_message", "content": "read a.py"}))
            seen = [json.loads(await ws.recv())]
            while seen[-1]["type"] != "done":
                seen.append(json.loads(await ws.recv()))
            [call] = [e for e in seen if e["type"] == "tool_call"]
            await ws.send(
                json.dumps({"type": "tool_result", "call_id": call["call_id"], "result": "x=1"})
            )
            while (event := json.loads(await ws.recv()))["type"] != "done":
                pass
    assert event["status"] == "completed"
    assert reads["reads"] == 0
