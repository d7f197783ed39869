"""Seed 000's SSE shape (``?format=seed000``): switch_agent, completion, nested tool calls."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.mesh import Mesh
from tests.support.sse import parse_sse


def seed000_chunks(text: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e, json.loads(d)) for e, d in parse_sse(text) if e != "comment"]


async def test_sse_in_seed_000_shape_routes_answers_and_completes(mesh: Mesh) -> None:
    route = {"agent": "coder", "confidence": "high", "reason": "code to write"}
    mesh.scripted.enqueue({"text": json.dumps(route)}, {"text": "Creating the function."})
    body = {"session_id": "sse-000", "message": "Create a sort function"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream?format=seed000", json=body)
    chunks = seed000_chunks(response.text)
    kinds = [(event, data.get("type")) for event, data in chunks]
    assert kinds[0] == ("message", "switch_agent") and kinds[-2:] == [
        ("message", "completion"),
        ("done", None),
    ]
    switch = chunks[0][1]["data"]
    assert (switch["from_agent"], switch["to_agent"], switch["reason"]) == (
        "orchestrator",
        "coder",
        "code to write",
    )
    assert switch["confidence"] == "high" and switch["timestamp"]
    text = "".join(d["data"]["content"] for _, d in chunks if d.get("type") == "assistant_message")
    assert text == "Creating the function."
    assert all(
        d["data"]["agent"] == "coder" for _, d in chunks if d.get("type") == "assistant_message"
    )
    assert chunks[-2][1]["data"] == {
        "status": "success",
        "message": "Task completed successfully",
        "agent": "orchestrator",
    }
    assert chunks[-1][1] == {"status": "completed"}


async def test_sse_in_seed_000_shape_nests_the_tool_call(mesh: Mesh) -> None:
    arguments = {"path": "utils/sort.py", "content": "x = 1\n"}
    mesh.scripted.enqueue({"tool_calls": [{"name": "write_file", "arguments": arguments}]})
    body = {"session_id": "sse-000-call", "message": "write it", "agent_type": "coder"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream?format=seed000", json=body)
    chunks = seed000_chunks(response.text)
    (call,) = [d["data"] for _, d in chunks if d.get("type") == "tool_call"]
    assert call["tool_call"]["name"] == "write_file" and call["tool_call"]["call_id"]
    assert call["tool_call"]["arguments"] == arguments
    assert call["requires_approval"] is True and call["reason"]
    assert not [d for _, d in chunks if d.get("type") == "completion"]
    assert chunks[-1] == ("done", {"status": "awaiting_approval"})


async def test_sse_in_seed_000_shape_reports_errors_as_error_events(mesh: Mesh) -> None:
    body = {"session_id": "sse-000-err", "message": "x", "agent_type": "nobody"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream?format=seed000", json=body)
    chunks = seed000_chunks(response.text)
    (error,) = [d["data"] for e, d in chunks if e == "error"]
    assert error["error_code"] == "AGENT_NOT_FOUND" and "nobody" in error["message"]
    assert chunks[-1] == ("done", {"status": "error"})


async def test_an_unknown_sse_format_is_refused(mesh: Mesh) -> None:
    body = {"session_id": "sse-fmt", "message": "hi"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream?format=seed999", json=body)
    assert response.status_code == 400 and response.json()["error_code"] == "INVALID_MESSAGE"
