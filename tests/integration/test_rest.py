"""The gateway's REST surface over the in-process mesh: shapes, errors, ownership."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
import websockets

from clients.python import MeshClient
from codelab.v1 import common_pb2, hitl_pb2, llmproxy_pb2, runtime_pb2
from services.common.asgi import running_asgi
from services.gateway import render
from services.gateway.app import create_app
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh

USAGE_KEYS = {
    "session_id", "total_requests", "successful_requests", "failed_requests", "total_tokens",
    "prompt_tokens", "completion_tokens", "average_duration_ms", "requests_with_tools",
    "reasoning_tokens",
}  # fmt: skip
AUDIT_KEYS = {
    "id", "session_id", "call_id", "tool_name", "original_arguments", "modified_arguments",
    "decision", "feedback", "user_id", "event_type", "created_at",
}  # fmt: skip
SESSION_ENDPOINTS = [
    ("GET", "/agents/{sid}/current"),
    ("GET", "/sessions/{sid}/history"),
    ("GET", "/sessions/{sid}/pending-approvals"),
    ("GET", "/events/metrics/session/{sid}"),
    ("DELETE", "/sessions/{sid}"),
]
# Audit entries outlive their session, so only another user's session is refused here.
OWNED_ENDPOINTS = [*SESSION_ENDPOINTS, ("GET", "/events/audit-log?session_id={sid}")]


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """One agent (no routing call before the answer), so each scripted reply lands in its turn."""
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


@pytest.fixture
async def http(mesh: Mesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["type"] == "error" and body["error_code"] == code and body["content"]
    assert isinstance(body["details"], dict)
    return body


async def until_done(ws: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        events.append(json.loads(await ws.recv()))
        if events[-1]["type"] == "done":
            return events


async def ws_turn(mesh: Mesh, sid: str, text: str = "hello") -> list[dict[str, Any]]:
    async with websockets.connect(mesh.ws_url(sid)) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": text}))
        return await until_done(ws)


def tokens(events: list[dict[str, Any]]) -> str:
    return "".join(e.get("token", "") for e in events if e["type"] == "assistant_message")


async def test_agents_are_listed_in_the_seed_002_shape(database_url: str) -> None:
    async with (
        running_mesh(database_url) as multi_agent,
        httpx.AsyncClient(base_url=multi_agent.gateway_url, timeout=10) as http,
    ):
        response = await http.get("/agents")
    assert response.status_code == 200
    agents = response.json()
    assert isinstance(agents, list) and "coder" in {a["type"] for a in agents}
    for agent in agents:
        assert set(agent) == {
            "type", "name", "description", "allowed_tools", "has_file_restrictions",
            "file_restrictions",
        }  # fmt: skip
        assert isinstance(agent["allowed_tools"], list)


async def test_current_agent_of_a_new_session(http: httpx.AsyncClient) -> None:
    assert (await http.post("/sessions", json={"session_id": "r-cur"})).status_code == 201
    response = await http.get("/agents/r-cur/current")
    assert response.status_code == 200
    body = response.json()
    assert body["session_id"] == "r-cur" and body["switch_count"] == 0
    assert body["type"] == body["current_agent"] and body["current_agent"]
    assert {"name", "description", "allowed_tools", "has_file_restrictions"} <= set(body)
    assert "last_switch_at" in body


async def test_sessions_are_created_and_listed(http: httpx.AsyncClient) -> None:
    body = {"session_id": "r-s1", "title": "Sorting", "system_prompt": "Be brief."}
    created = await http.post("/sessions", json=body)
    assert created.status_code == 201
    assert created.json() == {**created.json(), "session_id": "r-s1", "status": "created"}
    assert created.json()["created_at"]
    generated = await http.post("/sessions")
    assert generated.status_code == 201 and generated.json()["session_id"]
    listed = (await http.get("/sessions")).json()["sessions"]
    by_id = {s["session_id"]: s for s in listed}
    assert set(by_id) == {"r-s1", generated.json()["session_id"]}
    assert by_id["r-s1"] == {
        **by_id["r-s1"], "title": "Sorting", "is_active": True, "message_count": 0,
    }  # fmt: skip
    assert set(by_id["r-s1"]) == {
        "session_id", "title", "created_at", "last_activity", "is_active", "message_count",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("path", "raw", "code"),
    [
        ("/sessions", "{oops", "INVALID_MESSAGE"),
        ("/sessions", "[1]", "INVALID_MESSAGE"),
        ("/sessions", '{"title": 5}', "MISSING_REQUIRED_FIELD"),
        ("/agent/message", "not json", "INVALID_MESSAGE"),
        ("/agent/message", b'{"session_id": "\xff"}', "INVALID_MESSAGE"),  # not UTF-8
        ("/agent/message", '{"message": "no session"}', "MISSING_REQUIRED_FIELD"),
        ("/agent/message", '{"session_id": "s"}', "MISSING_REQUIRED_FIELD"),
        ("/agent/message", '{"session_id": "s", "message": {"type": "x"}}', "INVALID_MESSAGE_TYPE"),
        ("/agent/tool_result", "{", "INVALID_MESSAGE"),
        ("/agent/tool_result", '{"session_id": "s", "result": 1}', "MISSING_REQUIRED_FIELD"),
        ("/agent/tool_result", '{"session_id": "s", "call_id": "c"}', "MISSING_REQUIRED_FIELD"),
        ("/agent/tool_result", '{"call_id": "c", "result": 1}', "MISSING_REQUIRED_FIELD"),
    ],
)
async def test_bad_bodies_are_400_with_the_code(
    http: httpx.AsyncClient, path: str, raw: str | bytes, code: str
) -> None:
    assert assert_error(await http.post(path, content=raw), 400, code)["details"] == {}


@pytest.mark.parametrize(("method", "template"), SESSION_ENDPOINTS)
async def test_an_unknown_session_is_404(
    http: httpx.AsyncClient, method: str, template: str
) -> None:
    response = await http.request(method, template.format(sid="r-nope"))
    assert_error(response, 404, "SESSION_NOT_FOUND")


async def test_history_has_the_turn(mesh: Mesh, http: httpx.AsyncClient) -> None:
    mesh.scripted.enqueue({"text": "Stored answer."})
    await ws_turn(mesh, "r-h", "remember this")
    body = (await http.get("/sessions/r-h/history")).json()
    assert body["session_id"] == "r-h"
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("user", "remember this"),
        ("assistant", "Stored answer."),
    ]
    assert all(m["timestamp"] and "tool_calls" not in m for m in body["messages"])


async def test_tool_result_over_rest_resumes_the_turn(mesh: Mesh, http: httpx.AsyncClient) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
        {"text": "Read it."},
    )
    async with websockets.connect(mesh.ws_url("r-tool")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "read a.py"}))
        first = await until_done(ws)
        call = next(e for e in first if e["type"] == "tool_call")
        assert first[-1]["status"] == "awaiting_tool_result"
        body = {"session_id": "r-tool", "call_id": call["call_id"], "result": {"content": "x=1"}}
        accepted = await http.post("/agent/tool_result", json=body)
        assert (accepted.status_code, accepted.json()) == (202, {"status": "accepted"})
        second = await until_done(ws)
    assert tokens(second) == "Read it." and second[-1]["status"] == "completed"
    messages = (await http.get("/sessions/r-tool/history")).json()["messages"]
    asked = next(m for m in messages if m.get("tool_calls"))
    assert asked["tool_calls"] == [
        {"id": call["call_id"], "name": "read_file", "arguments": {"path": "a.py"}}
    ]
    assert any(m.get("tool_call_id") == call["call_id"] for m in messages if m["role"] == "tool")


@pytest.mark.parametrize(
    "body",
    [
        {"message": {"type": "user_message", "content": "hi"}},
        {"message": "hi", "message_type": "user_message"},
        {"content": "hi"},
    ],
)
async def test_agent_message_is_accepted_and_streams_on_the_websocket(
    mesh: Mesh, http: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    mesh.scripted.enqueue({"text": "Answer over the socket."})
    assert (await http.post("/sessions", json={"session_id": "r-msg"})).status_code == 201
    # last_event_id=0 replays from the start: the turn cannot slip past a late attach.
    async with websockets.connect(mesh.ws_url("r-msg", "last_event_id=0")) as ws:
        accepted = await http.post("/agent/message", json={"session_id": "r-msg", **body})
        assert (accepted.status_code, accepted.json()) == (202, {"status": "accepted"})
        events = await until_done(ws)
    assert tokens(events) == "Answer over the socket." and events[-1]["status"] == "completed"


async def test_pending_approvals_list_a_waiting_tool(mesh: Mesh, http: httpx.AsyncClient) -> None:
    arguments = {"path": "b.py", "content": "x = 1\n"}
    mesh.scripted.enqueue({"tool_calls": [{"name": "write_file", "arguments": arguments}]})
    events = await ws_turn(mesh, "r-hitl", "write b.py")
    assert events[-1]["status"] == "awaiting_approval"
    call = next(e for e in events if e["type"] == "tool_call")
    body = (await http.get("/sessions/r-hitl/pending-approvals")).json()
    assert body["session_id"] == "r-hitl"
    (item,) = body["pending_approvals"]
    assert item == {**item, "type": "tool_approval", "call_id": call["call_id"]}
    assert item["tool_name"] == "write_file" and item["arguments"] == arguments
    assert item["reason"] and item["created_at"] and item["expires_at"]
    assert item["timeout_seconds"] > 0


def test_plan_approvals_render_their_summary() -> None:
    pending = runtime_pb2.PendingApproval(
        type="plan_approval",
        approval_request_id="plan-approval-1",
        plan_id="plan-1",
        plan_summary=common_pb2.PlanSummary(
            goal="Login form", subtasks_count=4, total_estimated_time="1h"
        ),
        created_at="2026-02-02T19:40:00+00:00",
    )
    assert render.pending_approval(pending) == {
        "type": "plan_approval",
        "approval_request_id": "plan-approval-1",
        "plan_id": "plan-1",
        "plan_summary": {"goal": "Login form", "subtasks_count": 4, "total_estimated_time": "1h"},
        "created_at": "2026-02-02T19:40:00+00:00",
    }


async def test_a_deleted_session_is_gone(http: httpx.AsyncClient) -> None:
    assert (await http.post("/sessions", json={"session_id": "r-del"})).status_code == 201
    deleted = await http.delete("/sessions/r-del")
    assert (deleted.status_code, deleted.json()) == (200, {"session_id": "r-del", "deleted": True})
    assert_error(await http.get("/sessions/r-del/history"), 404, "SESSION_NOT_FOUND")
    assert (await http.get("/sessions")).json()["sessions"] == []


async def test_usage_metrics_per_session_and_in_total(mesh: Mesh, http: httpx.AsyncClient) -> None:
    mesh.scripted.enqueue(
        {"text": "first", "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
        {"text": "second", "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
    )
    await ws_turn(mesh, "r-m1")
    await ws_turn(mesh, "r-m2")
    one = (await http.get("/events/metrics/session/r-m1")).json()
    assert set(one) == USAGE_KEYS | {"tool_schema_tokens"} and one["session_id"] == "r-m1"
    assert set(one["tool_schema_tokens"]) == {"offered", "all_allowed", "saved"}
    assert one["total_requests"] >= 1 and one["prompt_tokens"] >= 7
    assert one["total_tokens"] == one["prompt_tokens"] + one["completion_tokens"]
    listed = (await http.get("/events/metrics/sessions")).json()["sessions"]
    assert [s["session_id"] for s in listed] == ["r-m2", "r-m1"]
    limited = (await http.get("/events/metrics/sessions", params={"limit": 1})).json()
    assert [s["session_id"] for s in limited["sessions"]] == ["r-m2"]
    totals = (await http.get("/events/metrics")).json()
    assert totals["total_requests"] == sum(s["total_requests"] for s in listed)
    assert totals["sessions"] == 2 and totals["total_events"] > 0
    assert {"events_by_type", "active_sessions", "agent_switches"} <= set(totals)
    stats = (await http.get("/events/stats")).json()
    assert set(stats) == {
        "total_events", "events_by_type", "sessions", "active_sessions", "agent_switches",
    }  # fmt: skip
    assert stats["sessions"] == 2 and sum(stats["events_by_type"].values()) == stats["total_events"]


@pytest.mark.parametrize("path", ["/events/metrics/sessions", "/events/audit-log"])
@pytest.mark.parametrize("limit", ["0", "1001", "-3", "ten", ""])
async def test_a_bad_limit_is_400(http: httpx.AsyncClient, path: str, limit: str) -> None:
    body = assert_error(
        await http.get(path, params={"limit": limit}), 400, "MISSING_REQUIRED_FIELD"
    )
    assert "limit" in body["content"]


async def record_audit(mesh: Mesh, sid: str, decision: str, event_type: str) -> None:
    await mesh.client.hitl.RecordAudit(
        hitl_pb2.AuditEntry(
            session_id=sid,
            call_id=f"call-{sid}-{decision}",
            tool_name="write_file",
            original_arguments_json='{"path": "a.py"}',
            decision=decision,
            event_type=event_type,
        )
    )


async def test_audit_log_filters(mesh: Mesh, http: httpx.AsyncClient) -> None:
    await record_audit(mesh, "r-a1", "approve", "hitl_decision")
    await record_audit(mesh, "r-a1", "expired", "hitl_timeout")
    await record_audit(mesh, "r-a2", "reject", "hitl_decision")
    entries = (await http.get("/events/audit-log")).json()["entries"]
    assert [e["decision"] for e in entries] == ["reject", "expired", "approve"]
    assert all(set(e) == AUDIT_KEYS for e in entries)
    assert entries[0]["original_arguments"] == {"path": "a.py"}
    assert entries[0]["modified_arguments"] is None and isinstance(entries[0]["id"], int)
    by_session = await http.get("/events/audit-log", params={"session_id": "r-a1"})
    assert [e["decision"] for e in by_session.json()["entries"]] == ["expired", "approve"]
    by_type = await http.get("/events/audit-log", params={"event_type": "hitl_timeout"})
    assert [e["decision"] for e in by_type.json()["entries"]] == ["expired"]
    limited = await http.get("/events/audit-log", params={"limit": "1"})
    assert [e["decision"] for e in limited.json()["entries"]] == ["reject"]


async def test_llmproxy_lists_usage_most_recent_first(mesh: Mesh) -> None:
    for sid in ("u-1", "u-2", "u-1"):
        request = llmproxy_pb2.CompleteRequest(
            session_id=sid, messages=[llmproxy_pb2.ChatMessage(role="user", content="hi")]
        )
        async for _ in mesh.client.llmproxy.Complete(request):
            pass
    listed = await mesh.client.llmproxy.ListUsage(llmproxy_pb2.ListUsageRequest())
    assert [(u.session_id, u.total_requests) for u in listed.sessions] == [("u-1", 2), ("u-2", 1)]
    one = await mesh.client.llmproxy.ListUsage(llmproxy_pb2.ListUsageRequest(limit=1))
    assert [u.session_id for u in one.sessions] == ["u-1"]
    total = await mesh.client.llmproxy.GetUsage(llmproxy_pb2.GetUsageRequest())
    assert (total.session_id, total.total_requests) == ("", 3)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.client.llmproxy.ListUsage(llmproxy_pb2.ListUsageRequest(limit=-1))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


ALICE = {"Authorization": "Bearer k-alice"}
BOB = {"Authorization": "Bearer k-bob"}
EVERY_ENDPOINT = [
    *OWNED_ENDPOINTS,
    ("GET", "/agents"),
    ("GET", "/sessions"),
    ("POST", "/sessions"),
    ("GET", "/events/metrics/sessions"),
    ("GET", "/events/metrics"),
    ("GET", "/events/audit-log"),
    ("GET", "/events/stats"),
    ("POST", "/agent/message"),
    ("POST", "/agent/tool_result"),
]


async def test_with_api_keys_users_see_only_their_own_sessions(mesh: Mesh) -> None:
    keys = {"k-alice": "alice", "k-bob": "bob"}
    settings = dataclasses.replace(mesh.settings, gateway_api_keys=keys)
    client = MeshClient.from_settings(settings)
    async with (
        running_asgi(create_app(settings, client), lifespan="on") as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http,
    ):
        for method, template in EVERY_ENDPOINT:
            denied = await http.request(method, template.format(sid="alice-1"))
            assert_error(denied, 401, "UNAUTHORIZED")
        created = await http.post("/sessions", json={"session_id": "alice-1"}, headers=ALICE)
        assert created.status_code == 201
        for sid in ("alice-1", "elsewhere"):
            await record_audit(mesh, sid, "approve", "hitl_decision")
            request = llmproxy_pb2.CompleteRequest(
                session_id=sid, messages=[llmproxy_pb2.ChatMessage(role="user", content="hi")]
            )
            async for _ in mesh.client.llmproxy.Complete(request):
                pass
        for method, template in OWNED_ENDPOINTS:
            foreign = await http.request(method, template.format(sid="alice-1"), headers=BOB)
            assert_error(foreign, 404, "SESSION_NOT_FOUND")
        message = {"session_id": "alice-1", "content": "let me in"}
        assert_error(
            await http.post("/agent/message", json=message, headers=BOB), 404, "SESSION_NOT_FOUND"
        )

        async def ids(path: str, key: str, headers: dict[str, str]) -> list[str]:
            response = await http.get(path, headers=headers)
            assert response.status_code == 200, response.text
            return [item["session_id"] for item in response.json()[key]]

        assert await ids("/sessions", "sessions", ALICE) == ["alice-1"]
        assert await ids("/sessions", "sessions", BOB) == []
        assert await ids("/events/audit-log", "entries", ALICE) == ["alice-1"]
        assert await ids("/events/audit-log", "entries", BOB) == []
        assert await ids("/events/metrics/sessions", "sessions", ALICE) == ["alice-1"]
        assert await ids("/events/metrics/sessions", "sessions", BOB) == []
        internal = {"X-Internal-Auth": INTERNAL_KEY}
        assert await ids("/sessions", "sessions", internal) == ["alice-1"]
        usage = await http.get("/events/metrics/session/alice-1", headers=ALICE)
        assert usage.json()["total_requests"] == 1
