"""Seed 000's context hand-over: the agent that takes over is told who had the session,
why it switched, and the session's context metadata."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.ide import ide, of
from tests.support.mesh import Mesh


def system_prompt(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def calls(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_the_agent_taking_over_gets_the_switch_and_the_context(mesh: Mesh) -> None:
    route = {"agent": "coder", "confidence": "high", "reason": "a function to write"}
    mesh.scripted.enqueue(
        {"text": json.dumps(route)},
        calls("write_file", {"path": "src/sort.py", "content": "def sort(a): ..."}),
        calls("read_file", {"path": "config.py"}),
        {"text": "Sorted, but config.py is missing."},
        {"text": "Looking at the trace."},
    )
    metadata = {
        "user_preferences": {"language": "python", "style": "pep8"},
        "pending_tasks": ["Add tests"],
    }
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        created = await http.post("/sessions", json={"session_id": "hand", "metadata": metadata})
        assert created.status_code == 201, created.text
        refused = await http.post("/sessions", json={"metadata": ["not", "an", "object"]})
        assert refused.status_code == 400
        assert refused.json()["error_code"] == "MISSING_REQUIRED_FIELD"
    async with ide(mesh, "hand") as client:
        first = await client.say("Create a sort function")
        (write,) = of(first, "tool_call")
        second = await client.decide(write["call_id"], "approve")
        third = await client.result(of(second, "tool_call")[0]["call_id"], {"ok": True})
        (read,) = of(third, "tool_call")
        await client.turn(
            {"type": "tool_result", "call_id": read["call_id"], "error": "File not found"}
        )
        await client.turn(
            {
                "type": "switch_agent",
                "agent_type": "debug",
                "content": "why is config.py missing?",
                "reason": "a failure to explain",
            }
        )
    taking_over, after_write, after_error, debug = (
        system_prompt(r) for r in mesh.scripted.requests[1:5]
    )
    assert "Previous agent: orchestrator\nReason for switch: a function to write" in taking_over
    assert 'User preferences: {"language": "python", "style": "pep8"}' in taking_over
    assert "Pending tasks:\n- Add tests" in taking_over
    assert "Last error" not in taking_over and "Files modified" not in taking_over
    assert "Files modified:\n- src/sort.py" in after_write
    assert "Last error: Error from the IDE: File not found" in after_error
    assert "Previous agent: orchestrator\nReason for switch: a failure to explain" in debug
    assert "Files modified:\n- src/sort.py" in debug and "User preferences" in debug
