"""Remote tools: a catalog tool with a remote_endpoint is an HTTP POST of its arguments,
run by the runtime behind hitl; the answer (or the failure) is the tool's result."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.http_app import served
from tests.support.ide import ide, of
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh

ADMIN = {"X-Internal-Auth": INTERNAL_KEY}


class Endpoint:
    """A real HTTP server: /sum adds, /broken answers 500; every request is kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append((request.path, body, dict(request.headers)))
        if request.path == "/broken":
            return web.Response(status=500, text="database is down")
        return web.json_response({"sum": body["a"] + body["b"]})


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    server = Endpoint()
    app = web.Application()
    app.router.add_post("/{name}", server.handle)
    async with served(app) as url:
        server.url = url
        yield server


@pytest.fixture
async def mesh(database_url: str, endpoint: Endpoint) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        schema = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
        tools = [
            {
                "name": "calc.sum",
                "description": "Add two integers on the calculation service",
                "parameters": schema,
                "executor": "remote",
                "remote_endpoint": f"{endpoint.url}/sum",
                "risk": "low",
            },
            {
                "name": "calc.broken",
                "description": "A calculation that fails",
                "parameters": schema,
                "executor": "remote",
                "remote_endpoint": f"{endpoint.url}/broken",
                "risk": "medium",
            },
        ]
        async with httpx.AsyncClient(
            base_url=running.gateway_url, headers=ADMIN, timeout=60
        ) as http:
            reply = await http.post("/admin/tools", json={"tools": tools})
            assert reply.status_code == 200, reply.text
        await asyncio.sleep(1.2)  # the orchestrator looks at the catalog's version each second
        yield running


async def test_a_remote_tool_posts_its_arguments_and_the_answer_reaches_the_model(
    mesh: Mesh, endpoint: Endpoint
) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "calc_sum", "arguments": {"a": 2, "b": 40}}]},
        {"text": "42"},
    )
    async with ide(mesh, "remote-1") as client:
        events = await client.say("add 2 and 40")
    assert not of(events, "tool_call") and events[-1]["status"] == "completed"
    path, body, headers = endpoint.seen[0]
    assert (path, body) == ("/sum", {"a": 2, "b": 40})
    assert headers["X-CodeLab-Session"] == "remote-1"
    assert json.loads(mesh.scripted.requests[-1]["messages"][-1]["content"]) == {"sum": 42}


async def test_a_failing_endpoint_is_a_failed_result_after_the_approval(
    mesh: Mesh, endpoint: Endpoint
) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "calc.broken", "arguments": {"a": 1, "b": 1}}]},
        {"text": "It failed."},
    )
    async with ide(mesh, "remote-2") as client:
        events = await client.say("compute")
        call = of(events, "tool_call")[0]
        assert call["requires_approval"] and "medium risk" in call["reason"]
        assert not endpoint.seen  # nothing ran before the human said so
        events = await client.decide(call["call_id"], "approve")
    assert events[-1]["status"] == "completed"
    content = mesh.scripted.requests[-1]["messages"][-1]["content"]
    assert content == "Error: HTTP 500 from calc.broken: database is down"
    state = await mesh.pool.fetchval(
        "select state from orchestrator.tool_calls where session_id = 'remote-2'"
    )
    assert state == "failed"
