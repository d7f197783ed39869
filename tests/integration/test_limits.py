"""Per-key limits and per-turn budgets: each trips with its code and retry_after, over
WebSocket, SSE and REST; counters live in Postgres, so two replicas share them (over
plaintext and over mutual TLS)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from clients.python import MeshClient
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.common.channels import error_code, error_details
from services.common.db import create_pool
from services.common.limit_settings import LimitSettings, Price
from services.orchestrator import server as orchestrator
from tests.support.certs import mesh_tls
from tests.support.databases import add_template
from tests.support.ide import ide, of
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh, wait_serving
from tests.support.runtime import until

USAGE = {"prompt_tokens": 600, "completion_tokens": 400}
ALICE = {"Authorization": "Bearer k-alice"}
ROOT = {"Authorization": "Bearer k-root"}
KEYS = {"k-alice": "alice", "k-root": "admin"}


@pytest.fixture
def limits(request: pytest.FixtureRequest) -> LimitSettings:
    return LimitSettings(**getattr(request, "param", {}))


@pytest.fixture
def tls(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Plaintext unless a test asks for ``"mtls"``."""
    return mesh_tls(tmp_path / "certs") if getattr(request, "param", "") == "mtls" else {}


@pytest.fixture
async def mesh(
    database_url: str, limits: LimitSettings, tls: dict[str, Any]
) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False, limits=limits, **tls) as running:
        if limits.messages_per_minute:
            await inside_one_minute(running)
        yield running


async def inside_one_minute(mesh: Mesh) -> None:
    """Until the database clock's minute has 15 s left: messages are counted per clock
    minute, and a test whose messages crossed into the next one would see the count restart."""

    async def early() -> bool:
        return bool(await mesh.pool.fetchval("select extract(second from now()) < 45"))

    await until(early, 20)


def only_error(events: list[dict[str, Any]]) -> dict[str, Any]:
    errors = of(events, "error")
    assert len(errors) == 1, events
    assert events[-1]["type"] == "done" and events[-1]["status"] == "error"
    return errors[0]


def assert_limited(body: dict[str, Any], code: str, limit: str, most: int) -> int:
    """The error names the code and the limit; returns retry_after (whole seconds)."""
    assert body["error_code"] == code, body
    details = body["details"]
    assert details["limit"] == limit
    retry = details["retry_after"]
    assert isinstance(retry, int) and 1 <= retry <= most
    return retry


@pytest.mark.parametrize("limits", [{"messages_per_minute": 2}], indirect=True)
async def test_messages_per_minute_over_websocket(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "one"}, {"text": "two"}, {"text": "three"})
    async with ide(mesh, "rate-ws") as client:
        assert (await client.say("1"))[-1]["status"] == "completed"
        assert (await client.say("2"))[-1]["status"] == "completed"
        refused = only_error(await client.say("3"))
    assert_limited(refused, "RATE_LIMITED", "messages_per_minute", 60)
    assert "3" not in [m["content"] for m in await history(mesh, "rate-ws")]


async def history(mesh: Mesh, sid: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        body: dict[str, Any] = (await http.get(f"/sessions/{sid}/history")).json()
    return list(body["messages"])


async def answered(mesh: Mesh, sid: str) -> None:
    """Until the session's turn (started over REST, answered in the background) sent done."""
    query = "select exists (select 1 from orchestrator.events where session_id = $1 and type = $2)"
    async with asyncio.timeout(20):
        while True:
            if await mesh.pool.fetchval(query, sid, "done"):
                return
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("limits", [{"messages_per_minute": 1}], indirect=True)
async def test_messages_per_minute_over_rest_and_sse(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        body = {"session_id": "rate-rest", "message": "hello"}
        assert (await http.post("/agent/message", json=body)).status_code == 202
        await answered(mesh, "rate-rest")  # else the stream below may see this turn's done
        refused = await http.post("/agent/message", json=body)
        assert refused.status_code == 429
        retry = assert_limited(refused.json(), "RATE_LIMITED", "messages_per_minute", 60)
        assert refused.headers["Retry-After"] == str(retry)
        async with http.stream("POST", "/agent/message/stream", json=body) as stream:
            frames = [line async for line in stream.aiter_lines() if line.startswith("data:")]
    events = [json.loads(frame[5:]) for frame in frames]
    assert_limited(only_error(events), "RATE_LIMITED", "messages_per_minute", 60)


@pytest.mark.parametrize("limits", [{"sessions_open": 1}], indirect=True)
async def test_sessions_open_at_once(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        assert (await http.post("/sessions", json={"session_id": "open-1"})).status_code == 201
        again = await http.post("/sessions", json={"session_id": "open-1"})
        assert again.status_code == 201  # an open session is not opened twice
        refused = await http.post("/sessions", json={"session_id": "open-2"})
        assert refused.status_code == 429
        assert_limited(refused.json(), "RATE_LIMITED", "sessions_open", 900)
        async with ide(mesh, "open-3") as client:
            closed = await client.ws.recv()
        assert_limited(json.loads(closed), "RATE_LIMITED", "sessions_open", 900)
        assert (await http.delete("/sessions/open-1")).status_code == 200
        assert (await http.post("/sessions", json={"session_id": "open-2"})).status_code == 201


@pytest.mark.parametrize("limits", [{"tokens_per_day": 1000}], indirect=True)
async def test_tokens_per_day_stop_the_next_model_call(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "spent", "usage": USAGE}, {"text": "never sent"})
    async with ide(mesh, "tokens") as client:
        assert (await client.say("spend it"))[-1]["status"] == "completed"
        refused = only_error(await client.say("again"))
    assert_limited(refused, "BUDGET_EXCEEDED", "tokens_per_day", 86400)
    assert refused["details"]["used"] == 1000
    assert len(mesh.scripted.pending()) == 1  # refused before the upstream call


@pytest.mark.parametrize(
    "limits",
    [{"cost_per_day": 0.5, "prices": {"codelab-scripted": Price(500.0, 1000.0)}}],
    indirect=True,
)
async def test_cost_per_day_priced_per_model(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "costly", "usage": USAGE}, {"text": "never sent"})
    async with ide(mesh, "cost") as client:
        await client.say("spend it")
        refused = only_error(await client.say("again"))
    assert_limited(refused, "BUDGET_EXCEEDED", "cost_per_day", 86400)
    assert refused["details"]["used"] == pytest.approx(0.7)  # 600 * 500e-6 + 400 * 1000e-6


TIGHT = {
    "name": "tight",
    "display_name": "Tight",
    "description": "A small budget per turn",
    "prompt_pack": {"system_prompt": "Be brief."},
    "execution_policy": {"max_iterations": 10, "max_tool_calls": 1, "max_turn_tokens": 900},
    "tool_policy": {"mode": "static", "allowed": ["read_file"]},
}


async def test_a_turn_stops_at_its_tool_calls_and_tokens(database_url: str) -> None:
    await add_template(database_url, TIGHT)
    async with running_mesh(database_url) as mesh:  # agent_type picks the agent
        read = {"name": "read_file", "arguments": {"path": "a.py"}}
        mesh.scripted.enqueue({"tool_calls": [read, read]})
        async with ide(mesh, "turn-calls") as client:
            first = await client.say("read twice", agent_type="tight")
            call = of(first, "tool_call")[0]
            refused = only_error(await client.result(call["call_id"], "x = 1"))
        assert refused["error_code"] == "BUDGET_EXCEEDED"
        assert refused["details"] == {
            "limit": "max_tool_calls",
            "used": 2,
            "max": 1,
            "scope": "turn",
            "retry_after": 0,
        }
        mesh.scripted.enqueue({"tool_calls": [read], "usage": USAGE}, {"text": "never sent"})
        async with ide(mesh, "turn-tokens") as client:
            first = await client.say("read once", agent_type="tight")
            call = of(first, "tool_call")[0]
            refused = only_error(await client.result(call["call_id"], "x = 1"))
        assert refused["error_code"] == "BUDGET_EXCEEDED"
        assert refused["details"]["limit"] == "max_turn_tokens"
        assert refused["details"]["used"] == 1000
        assert len(mesh.scripted.pending()) == 1


def submit(sid: str) -> runtime_pb2.SubmitRequest:
    message = pb.ClientMessage(user_message=pb.UserMessage(content="hi", role="user"))
    return runtime_pb2.SubmitRequest(session_id=sid, user_id="alice", message=message)


@pytest.mark.parametrize("limits", [{"messages_per_minute": 2, "sessions_open": 2}], indirect=True)
@pytest.mark.parametrize("tls", ["plaintext", "mtls"], indirect=True)
async def test_two_replicas_share_the_counters(mesh: Mesh, database_url: str) -> None:
    pool = await create_pool(database_url)
    replica, port = await orchestrator.build(mesh.settings, pool, "127.0.0.1:0")
    await replica.start()
    client_b = MeshClient.from_settings(
        dataclasses.replace(mesh.settings, orchestrator_addr=f"127.0.0.1:{port}")
    )
    try:
        await wait_serving(client_b)
        await mesh.client.runtime.Submit(submit("shared-a"))
        await client_b.runtime.Submit(submit("shared-b"))
        with pytest.raises(grpc.aio.AioRpcError) as sessions:
            await mesh.client.runtime.Submit(submit("shared-c"))
        assert sessions.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_details(sessions.value)["limit"] == "sessions_open"
        with pytest.raises(grpc.aio.AioRpcError) as messages:
            await client_b.runtime.Submit(submit("shared-a"))
        assert error_code(messages.value) == "RATE_LIMITED"
        assert error_details(messages.value)["limit"] == "messages_per_minute"
    finally:
        await client_b.close()
        await replica.stop(0)
        await pool.close()


async def test_metrics_show_usage_against_limits_and_totals_to_admins(database_url: str) -> None:
    limits = LimitSettings(messages_per_minute=5, tokens_per_day=10_000)
    async with (
        running_mesh(
            database_url, multi_agent_mode=False, limits=limits, gateway_api_keys=KEYS
        ) as mesh,
        httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http,
    ):
        mesh.scripted.enqueue({"text": "counted", "usage": USAGE})
        body = {"session_id": "alice-1", "message": "hello"}
        async with http.stream("POST", "/agent/message/stream", json=body, headers=ALICE) as s:
            assert [line async for line in s.aiter_lines()]
        mine = (await http.get("/events/metrics", headers=ALICE)).json()
        assert mine["user_id"] == "alice" and "total_requests" not in mine
        assert mine["limits"]["messages_per_minute"]["used"] == 1
        assert mine["limits"]["messages_per_minute"]["limit"] == 5
        assert mine["limits"]["tokens_per_day"] == {
            "used": 1000,
            "limit": 10_000,
            "remaining": 9000,
            "resets_in": mine["limits"]["tokens_per_day"]["resets_in"],
        }
        assert mine["limits"]["sessions_open"]["limit"] == 0  # off
        stats = await http.get("/events/stats", headers=ALICE)
        assert stats.status_code == 403 and stats.json()["error_code"] == "UNAUTHORIZED"
        for admin in (ROOT, {"X-Internal-Auth": INTERNAL_KEY}):
            assert (await http.get("/events/stats", headers=admin)).status_code == 200
            totals = (await http.get("/events/metrics", headers=admin)).json()
            assert totals["total_requests"] >= 1 and "limits" in totals


@pytest.mark.parametrize("limits", [{"prices": {"*": Price(1, 2)}}], indirect=True)
async def test_usage_is_counted_with_no_limit_set(mesh: Mesh) -> None:
    """All limits off: the day's tokens and cost still show what the key used."""
    mesh.scripted.enqueue({"text": "counted", "usage": USAGE}, {"text": "again", "usage": USAGE})
    async with ide(mesh, "unlimited") as client:
        assert (await client.say("one"))[-1]["status"] == "completed"
        assert (await client.say("two"))[-1]["status"] == "completed"
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        used = (await http.get("/events/metrics")).json()["limits"]
    assert used["tokens_per_day"]["used"] == 2000
    assert used["tokens_per_day"]["limit"] == 0 and used["tokens_per_day"]["remaining"] is None
    assert used["cost_per_day"]["used"] == pytest.approx(0.0028)  # 2 * (600 * 1 + 400 * 2) / 1e6
    assert used["cost_per_day"]["limit"] == 0


@pytest.mark.parametrize("limits", [{"sessions_open": 1}], indirect=True)
async def test_sessions_open_over_chat_completions(mesh: Mesh) -> None:
    """/v1 opens its session with the stream's attach: past the limit the request is a
    429 (or, streaming, an error frame) with the code, no session is left behind and no
    model request was sent for it (none leaves before the attach while limits are on)."""
    mesh.scripted.enqueue({"text": "first"})
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        first = await http.post("/v1/chat/completions", json=body)
        assert first.status_code == 200, first.text
        refused = await http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
        streamed = await http.post("/v1/chat/completions", json={**body, "stream": True})
        frames = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]"
        assert json.loads(frames[-2])["error"]["code"] == "RATE_LIMITED"
        listed = (await http.get("/sessions")).json()["sessions"]
    assert len(listed) == 1
    assert len(mesh.scripted.requests) == 1  # a refused request cost no model call
