"""The gateway over the in-process mesh: WebSocket, SSE, health, metrics, auth."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from clients.python import MeshClient
from services.common.asgi import running_asgi
from services.common.errors import SettingsError
from services.gateway.app import create_app
from services.gateway.auth import check_bind
from services.gateway.health import HealthWatch
from tests.support.mesh import Mesh, running_mesh
from tests.support.runtime import until
from tests.support.sse import parse_sse


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """Single-agent mode: these tests are about transport, not routing."""
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def receive_until_done(ws: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(await ws.recv())
        events.append(event)
        if event["type"] == "done":
            return events


async def test_websocket_turn_has_tokens_then_done_with_session_and_seq(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Here is your answer, streamed."})
    async with websockets.connect(mesh.ws_url("ws-1")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "hello", "role": "user"}))
        events = await receive_until_done(ws)
    tokens = [e["token"] for e in events if e["type"] == "assistant_message" and "token" in e]
    assert "".join(tokens) == "Here is your answer, streamed."
    assert events[-2]["type"] == "assistant_message" and events[-2]["is_final"] is True
    assert events[-1] == {**events[-1], "type": "done", "is_final": True, "status": "completed"}
    assert {e["session_id"] for e in events} == {"ws-1"}
    seqs = [e["seq"] for e in events]
    assert all(isinstance(s, int) for s in seqs) and seqs == sorted(set(seqs))


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", "INVALID_MESSAGE"),
        ('["a", "list"]', "INVALID_MESSAGE"),
        ('{"type": "teleport"}', "INVALID_MESSAGE_TYPE"),
        ('{"content": "no type"}', "MISSING_REQUIRED_FIELD"),
        ('{"type": "user_message", "role": "user"}', "MISSING_REQUIRED_FIELD"),
        ('{"type": "tool_result", "result": {}}', "MISSING_REQUIRED_FIELD"),
        (
            '{"type": "plan_decision", "call_id": "x", "decision": "approve"}',
            "MISSING_REQUIRED_FIELD",
        ),
        ('{"type": "hitl_decision", "call_id": "c1", "decision": "maybe"}', "INVALID_DECISION"),
    ],
)
async def test_bad_input_gets_an_error_event_and_the_socket_stays_open(
    mesh: Mesh, frame: str, code: str
) -> None:
    async with websockets.connect(mesh.ws_url("ws-bad")) as ws:
        await ws.send(frame)
        error = json.loads(await ws.recv())
        assert error["type"] == "error" and error["error_code"] == code
        assert error["content"] and error["session_id"] == "ws-bad" and error["seq"] > 0
        await ws.send(json.dumps({"type": "user_message", "content": "still there?"}))
        events = await receive_until_done(ws)
    assert events[-1]["status"] == "completed"
    assert events[0]["seq"] > error["seq"]


@pytest.mark.parametrize(
    "body",
    [
        {"session_id": "sse-000", "message": "hi there", "message_type": "user_message"},
        {"session_id": "sse-002", "message": {"type": "user_message", "content": "hi there"}},
    ],
)
async def test_sse_accepts_both_seed_bodies(mesh: Mesh, body: dict[str, Any]) -> None:
    mesh.scripted.enqueue({"text": "SSE answer."})
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = parse_sse(response.text)
    messages = [json.loads(d) for e, d in frames if e == "message"]
    assert "".join(m.get("token", "") for m in messages) == "SSE answer."
    assert frames[-1][0] == "done"
    assert json.loads(frames[-1][1])["status"] == "completed"
    assert {m["session_id"] for m in messages} == {body["session_id"]}


async def test_sse_sends_heartbeats_while_the_model_is_silent(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "finally", "first_token_delay_ms": 800})
    body = {"session_id": "sse-beat", "message": "slow one"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream", json=body)
    frames = parse_sse(response.text)
    assert ("comment", ": heartbeat") in frames
    assert frames[-1][0] == "done"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("not json", "INVALID_MESSAGE"),
        (b'{"session_id": "\xff"}', "INVALID_MESSAGE"),  # not UTF-8
        ('{"message": "no session"}', "MISSING_REQUIRED_FIELD"),
        ('{"session_id": "s", "message": {"type": "nope"}}', "INVALID_MESSAGE_TYPE"),
    ],
)
async def test_sse_bad_body_is_a_400_with_the_code(mesh: Mesh, raw: str | bytes, code: str) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/agent/message/stream", content=raw)
    assert response.status_code == 400
    assert response.json()["error_code"] == code


async def test_health_aggregates_every_service_and_metrics_are_exposed(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        health = await http.get("/health")
        metrics = await http.get("/metrics")
    assert health.status_code == 200
    assert health.json()["down"] == {}
    assert health.json()["services"] == {
        "orchestrator": "SERVING",
        "toolsearch": "SERVING",
        "hitl": "SERVING",
        "llmproxy": "SERVING",
    }
    assert "codelab_gateway_websockets_open" in metrics.text


async def test_health_is_503_when_a_service_is_down(mesh: Mesh) -> None:
    await mesh.servers["hitl"].stop(0)
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        health = await http.get("/health")
        later = await http.get("/health")
    assert health.status_code == 503
    assert health.json()["services"]["hitl"] != "SERVING"
    down = health.json()["down"]
    assert list(down) == ["hitl"] and down["hitl"]["since"]
    assert later.json()["down"]["hitl"]["since"] == down["hitl"]["since"]  # since, not now


def iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


async def test_health_since_is_when_the_watcher_first_saw_the_service_down(mesh: Mesh) -> None:
    app = create_app(mesh.settings, MeshClient.from_settings(mesh.settings))
    watch: HealthWatch = app.state.health
    async with running_asgi(app, lifespan="on") as port:
        stopped = dt.datetime.now(dt.UTC).replace(microsecond=0)
        await mesh.servers["toolsearch"].stop(0)

        async def seen_down() -> bool:  # by its own poll: nobody asked /health yet
            return "toolsearch" in watch.down_since

        await until(seen_down, seconds=10)
        asked = dt.datetime.now(dt.UTC)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            health = await http.get("/health")
    assert health.status_code == 503
    since = iso(health.json()["down"]["toolsearch"]["since"])
    assert stopped <= since < asked


async def test_api_keys_guard_every_endpoint_but_health(mesh: Mesh) -> None:
    settings = dataclasses.replace(mesh.settings, gateway_api_keys={"k-alice": "alice"})
    client = MeshClient.from_settings(settings)
    async with running_asgi(create_app(settings, client), lifespan="on") as port:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/health")).status_code == 200
            body = {"session_id": "k-1", "message": "hi"}
            denied = await http.post("/agent/message/stream", json=body)
            assert denied.status_code == 401
            assert denied.json()["error_code"] == "UNAUTHORIZED"
            allowed = await http.post(
                "/agent/message/stream", json=body, headers={"Authorization": "Bearer k-alice"}
            )
            assert allowed.status_code == 200
        with pytest.raises(websockets.exceptions.InvalidStatus):
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/k-2?token=wrong"):
                pass
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws/k-2") as ws:
            await ws.send(json.dumps({"type": "user_message", "content": "no key"}))
            assert json.loads(await ws.recv())["error_code"] == "UNAUTHORIZED"
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws/k-2?token=k-alice") as ws:
            await ws.send(json.dumps({"type": "user_message", "content": "hello"}))
            events = await receive_until_done(ws)
            assert events[-1]["status"] == "completed"
    owner = await mesh.pool.fetchval(
        "select user_id from orchestrator.sessions where session_id = 'k-2'"
    )
    assert owner == "alice"


def test_an_open_gateway_refuses_a_public_address(mesh: Mesh) -> None:
    with pytest.raises(SettingsError, match="GATEWAY_API_KEYS"):
        check_bind(dataclasses.replace(mesh.settings, gateway_host="0.0.0.0"))
    check_bind(
        dataclasses.replace(mesh.settings, gateway_host="0.0.0.0", gateway_api_keys={"k": "u"})
    )
    check_bind(dataclasses.replace(mesh.settings, gateway_host="127.0.0.1"))
