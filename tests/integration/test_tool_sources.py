"""MCP servers as tool sources: registered through /admin/tool-sources, their tools in the
catalog as <source>.<tool>, found by tool search and run by the runtime behind hitl.

The server is tests/support/mcp_server.py, a real stdio MCP server on the official SDK.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.common.asgi import running_asgi
from tests.support import mcp_server
from tests.support.databases import add_template
from tests.support.ide import ide, of
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh

ADMIN = {"X-Internal-Auth": INTERNAL_KEY}
ROOT = Path(__file__).resolve().parent.parent.parent
SERVER = ROOT / "tests" / "support" / "mcp_server.py"
# The shipped example: retrieval over the weather source's tools ("weather.*").
DESK = json.loads((ROOT / "examples" / "tool_sources" / "desk.template.json").read_text())
TOOLS = ("get_forecast", "add", "slow", "fail", "big", "unlock", "crash")
WEATHER_TOOLS = {f"weather.{t}" for t in TOOLS}


def weather(**overrides: Any) -> dict[str, Any]:
    """The test server's source definition."""
    return {
        "name": "weather",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SERVER)],
        "risk": "low",
        **overrides,
    }


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    await add_template(database_url, DESK)
    async with running_mesh(database_url) as running:
        yield running


@pytest.fixture
async def http(mesh: Mesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=30, headers=ADMIN) as client:
        yield client


async def register(http: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    response = await http.post("/admin/tool-sources", json=weather(**overrides))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["state"] == "connected", body
    return body


async def catalog(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in (await http.get("/admin/tools")).json()["tools"]}


def tool_message(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


async def test_a_registered_source_puts_its_tools_in_the_catalog_until_removed(
    http: httpx.AsyncClient,
) -> None:
    body = await register(http, tool_risks={"fail": "high"}, env={"TOKEN": "hunter2"})
    assert set(body["tools"]) == WEATHER_TOOLS
    assert body["env"] == {"TOKEN": "***"}  # a literal value is never shown again
    tools = await catalog(http)
    forecast = tools["weather.get_forecast"]
    assert forecast["executor"] == "mcp" and forecast["risk"] == "low"
    assert forecast["description"].startswith("Weather forecast for a city")
    assert forecast["parameters"]["required"] == ["city"]
    assert tools["weather.fail"]["risk"] == "high"
    listed = (await http.get("/admin/tool-sources")).json()["sources"]
    assert [(s["name"], s["state"]) for s in listed] == [("weather", "connected")]
    health = (await http.get("/health")).json()["tool_sources"]
    assert health["weather"]["state"] == "connected" and health["weather"]["tools"] == 7

    narrowed = await register(http, allowed_tools=["get_*", "add"])
    assert set(narrowed["tools"]) == {"weather.get_forecast", "weather.add"}
    assert set(await catalog(http)) & WEATHER_TOOLS == {"weather.get_forecast", "weather.add"}

    removed = await http.delete("/admin/tool-sources/weather")
    assert removed.json() == {"name": "weather", "active": False, "deactivated_tools": 2}
    assert not set(await catalog(http)) & WEATHER_TOOLS
    assert (await http.get("/admin/tool-sources")).json()["sources"] == []
    assert (await http.get("/admin/tool-sources/weather")).status_code == 404


@pytest.mark.parametrize(
    ("definition", "problem"),
    [
        ({"name": "Bad Name", "command": "x"}, "'name'"),
        ({"name": "w", "transport": "grpc"}, "'transport'"),
        ({"name": "w", "transport": "stdio"}, "command"),
        ({"name": "w", "transport": "streamable-http", "url": "ftp://x"}, "url"),
        ({"name": "w", "command": "x", "risk": "extreme"}, "risk"),
        ({"name": "w", "command": "x", "timeout_seconds": 0}, "timeout_seconds"),
    ],
)
async def test_a_bad_definition_is_refused(
    http: httpx.AsyncClient, definition: dict[str, Any], problem: str
) -> None:
    response = await http.post("/admin/tool-sources", json=definition)
    assert response.status_code == 400, response.text
    assert response.json()["error_code"] == "MISSING_REQUIRED_FIELD"
    assert problem in response.json()["content"]


async def test_an_agent_finds_an_mcp_tool_by_search_and_its_result_reaches_the_model(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    await register(http)
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "tool_search", "arguments": {"query": "weather forecast"}}]},
        # The name a provider accepts: llmproxy maps it back to weather.get_forecast.
        {"tool_calls": [{"name": "weather_get_forecast", "arguments": {"city": "Paris"}}]},
        {"text": "Tomorrow in Paris: 18 C with light rain."},
    )
    async with ide(mesh, "mcp-1") as client:
        events = await client.say("hello there", agent_type="desk")
    found = json.loads(tool_message(mesh.scripted.requests[-2]))
    assert "weather.get_forecast" in [t["name"] for t in found]
    assert tool_message(mesh.scripted.requests[-1]) == "Forecast for Paris: 18 C, light rain"
    assert not of(events, "tool_call")  # the runtime ran it: nothing went to the IDE
    assert events[-1]["status"] == "completed"
    row = await mesh.pool.fetchrow(
        "select executor, state, result from orchestrator.tool_calls "
        "where session_id = 'mcp-1' and tool_name = 'weather.get_forecast'"
    )
    assert row is not None and row["state"] == "completed"
    audit = (await http.get("/events/audit-log", params={"session_id": "mcp-1"})).json()
    executions = [e for e in audit["entries"] if e["event_type"] == "tool_execution"]
    assert [(e["tool_name"], e["decision"]) for e in executions] == [
        ("weather.get_forecast", "completed")
    ]


async def test_a_risky_source_asks_a_human_first(mesh: Mesh, http: httpx.AsyncClient) -> None:
    await register(http, risk="medium", tool_risks={"add": "low"})
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "weather.get_forecast", "arguments": {"city": "Tokyo"}}]},
        {"text": "Clear sky in Tokyo."},
    )
    async with ide(mesh, "mcp-2") as client:
        events = await client.say("weather in Tokyo", agent_type="coder")
        call = of(events, "tool_call")[0]
        assert call["tool_name"] == "weather.get_forecast" and call["requires_approval"]
        assert "medium risk" in call["reason"]
        assert events[-1]["status"] == "awaiting_approval"
        events = await client.decide(call["call_id"], "approve")
    assert events[-1]["status"] == "completed"
    assert tool_message(mesh.scripted.requests[-1]) == "Forecast for Tokyo: 24 C, clear sky"
    audit = (await http.get("/events/audit-log", params={"session_id": "mcp-2"})).json()
    kinds = sorted(e["event_type"] for e in audit["entries"])
    assert "tool_execution" in kinds and len(kinds) >= 2  # the decision and the run


async def test_failures_timeouts_and_long_outputs_are_results_the_model_reads(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    await register(http, timeout_seconds=1, max_output_chars=100)
    calls = [
        ("weather.fail", {"reason": "closed"}),
        ("weather.slow", {"seconds": 5}),
        ("weather.big", {"characters": 5000}),
    ]
    mesh.scripted.enqueue(
        *({"tool_calls": [{"name": n, "arguments": a}]} for n, a in calls),
        {"text": "done"},
    )
    async with ide(mesh, "mcp-3") as client:
        await client.say("try them", agent_type="coder")
    rows = await mesh.pool.fetch(
        "select tool_name, state, result->>'content' as content from orchestrator.tool_calls "
        "where session_id = 'mcp-3' order by created_at"
    )
    outcome = {r["tool_name"]: (r["state"], r["content"]) for r in rows}
    refused = "Error executing tool fail: the desk refused: closed"
    assert outcome["weather.fail"] == ("failed", refused)
    assert outcome["weather.slow"] == ("failed", "Error: weather.slow timed out after 1 s")
    state, content = outcome["weather.big"]
    assert state == "completed" and content.startswith("x" * 100)
    assert "4900 characters cut" in content


async def test_a_tool_added_at_run_time_joins_the_catalog(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    await register(http)
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "weather.unlock", "arguments": {"name": "radar"}}]},
        {"text": "unlocked"},
    )
    async with ide(mesh, "mcp-4") as client:
        await client.say("unlock the radar", agent_type="coder")
    for _ in range(100):
        if "weather.radar" in await catalog(http):
            break
        await asyncio.sleep(0.1)
    assert (await catalog(http))["weather.radar"]["executor"] == "mcp"
    source = (await http.get("/admin/tool-sources/weather")).json()
    assert "weather.radar" in source["tools"]


async def test_a_server_that_dies_is_started_again_and_serves_the_next_call(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    first = await register(http)
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "weather.crash", "arguments": {}}]},
        {"text": "it crashed"},
    )
    async with ide(mesh, "mcp-5") as client:
        await client.say("crash it", agent_type="coder")
    crashed = await mesh.pool.fetchval(
        "select state from orchestrator.tool_calls where session_id = 'mcp-5'"
    )
    assert crashed == "failed"
    source: dict[str, Any] = {}
    for _ in range(100):  # back-off: the first retry comes within a second
        source = (await http.get("/admin/tool-sources/weather")).json()
        if source["state"] == "connected" and source["state_since"] != first["state_since"]:
            break
        await asyncio.sleep(0.1)
    assert source["state"] == "connected" and source["state_since"] != first["state_since"]
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "weather.add", "arguments": {"a": 2, "b": 3}}]},
        {"text": "5"},
    )
    async with ide(mesh, "mcp-6") as client:
        await client.say("add them", agent_type="coder")
    assert tool_message(mesh.scripted.requests[-1]) == "5"


def require_token(app: Any, expected: str) -> Any:
    """The MCP app behind a bearer check (what a hosted server does with its key)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"authorization") != expected.encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no"})
            return
        await app(scope, receive, send)

    return guarded


async def test_a_streamable_http_source_sends_headers_filled_from_the_secrets(
    database_url: str,
) -> None:
    app = require_token(mcp_server.server.streamable_http_app(), "Bearer s3cret")
    async with (
        running_asgi(app, lifespan="on") as port,
        running_mesh(database_url, tool_secrets={"DESK_TOKEN": "s3cret"}) as mesh,
        httpx.AsyncClient(base_url=mesh.gateway_url, timeout=30, headers=ADMIN) as http,
    ):
        remote = {
            "name": "desk",
            "transport": "streamable-http",
            "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"Authorization": "Bearer ${DESK_TOKEN}"},
            "risk": "low",
        }
        reply = await http.post("/admin/tool-sources", json=remote)
        body = reply.json()
        assert body["state"] == "connected" and "desk.get_forecast" in body["tools"]
        assert body["headers"] == {"Authorization": "Bearer ${DESK_TOKEN}"}
        mesh.scripted.enqueue(
            {"tool_calls": [{"name": "desk.add", "arguments": {"a": 20, "b": 22}}]},
            {"text": "42"},
        )
        async with ide(mesh, "mcp-http") as client:
            await client.say("add", agent_type="coder")
        assert tool_message(mesh.scripted.requests[-1]) == "42"

        wrong = {**remote, "name": "nokey", "headers": {"Authorization": "Bearer ${OTHER}"}}
        refused = await http.post("/admin/tool-sources", json=wrong, params={"wait_seconds": 1})
        assert refused.json()["state"] == "failed"
        assert "TOOL_SECRET_OTHER" in refused.json()["last_error"]
