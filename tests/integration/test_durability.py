"""Nothing lost, nothing doubled: resume by seq, idempotent inputs, cancel, busy policies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.orchestrator.state.store import SessionStore
from tests.support.history import history_problems
from tests.support.ide import Ide, ide, of, text_of
from tests.support.mesh import Mesh, running_mesh

LONG = " ".join(f"w{i}" for i in range(60))


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in items]}


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """Single-agent: these flows are about delivery, not routing."""
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def test_websocket_resume_sees_every_event_once_in_order(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": LONG, "token_delay_ms": 15})
    async with websockets.connect(mesh.ws_url("resume-ws")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "talk"}))
        first = [json.loads(await ws.recv()) for _ in range(5)]
    last = first[-1]["seq"]
    async with websockets.connect(mesh.ws_url("resume-ws", f"last_event_id={last}")) as ws:
        rest = await Ide(ws, "resume-ws").until_done()
    seqs = [e["seq"] for e in first + rest]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert text_of(first + rest) == LONG


async def test_sse_resume_with_last_event_id(mesh: Mesh) -> None:
    async with ide(mesh, "resume-sse") as client:
        events = await client.say("hello there")
    cut = events[0]["seq"]
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:  # noqa: SIM117
        async with http.stream(
            "GET", "/sessions/resume-sse/stream", headers={"Last-Event-ID": str(cut)}
        ) as response:
            assert response.status_code == 200
            replayed: list[dict[str, Any]] = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    replayed.append(json.loads(line[6:]))
                    if replayed[-1]["type"] == "done":
                        break
    assert [e["seq"] for e in replayed] == [e["seq"] for e in events if e["seq"] > cut]


async def test_resume_stream_of_an_unknown_session_is_404(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.get("/sessions/nobody/stream")
    assert response.status_code == 404
    assert response.json()["error_code"] == "SESSION_NOT_FOUND"


async def test_a_duplicate_tool_result_is_applied_once(mesh: Mesh) -> None:
    mesh.scripted.enqueue(calls(("read_file", {"path": "a.py"})), {"text": "Read."})
    async with ide(mesh, "dup-result") as client:
        call = of(await client.say("read a"), "tool_call")[0]
        first = await client.result(call["call_id"], "content")
        requests = len(mesh.scripted.requests)
        again = await client.result(call["call_id"], "content")
    assert text_of(first) == "Read."
    assert [e["type"] for e in again] == ["done"] and again[0]["status"] == "duplicate"
    assert len(mesh.scripted.requests) == requests
    rows = await mesh.pool.fetch(
        "select count(*) as n from orchestrator.messages where tool_call_id = $1", call["call_id"]
    )
    assert rows[0]["n"] == 1


async def test_a_duplicate_decision_is_applied_once(mesh: Mesh) -> None:
    mesh.scripted.enqueue(calls(("write_file", {"path": "a.py", "content": "x"})))
    async with ide(mesh, "dup-decision") as client:
        ask = of(await client.say("write"), "tool_call")[0]
        first = await client.decide(ask["call_id"], "approve")
        again = await client.decide(ask["call_id"], "approve")
        conflicting = await client.decide(ask["call_id"], "reject")
    assert len(of(first, "tool_call")) == 1
    assert again[-1]["status"] == "duplicate" and not of(again, "tool_call")
    assert [e["error_code"] for e in of(conflicting, "error")] == ["INVALID_DECISION"]
    audit = await mesh.pool.fetch("select 1 from hitl.audit_log where call_id = $1", ask["call_id"])
    assert len(audit) == 1


async def test_cancel_while_a_tool_call_waits_leaves_a_valid_history(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls(("read_file", {"path": "a.py"}), ("read_file", {"path": "b.py"})),
        {"text": "Starting over."},
    )
    async with ide(mesh, "cancel-tool") as client:
        call = of(await client.say("read both"), "tool_call")[0]
        cancelled = await client.turn({"type": "cancel"})
        late = await client.result(call["call_id"], "too late")
        after = await client.say("new question")
    assert cancelled[-1]["status"] == "cancelled"
    assert [e["error_code"] for e in of(late, "error")] == ["CANCELLED"]
    assert text_of(after) == "Starting over."
    assert history_problems(mesh.scripted.requests[-1]["messages"]) == []


async def test_cancel_mid_answer_keeps_the_partial_answer(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": LONG, "token_delay_ms": 30})
    async with ide(mesh, "cancel-stream") as client:
        await client.send({"type": "user_message", "content": "talk"})
        for _ in range(4):
            await client.ws.recv()
        await client.send({"type": "cancel"})
        events = await client.until_done()
        after = await client.say("again")
    assert events[-1]["status"] == "cancelled"
    assert after[-1]["status"] == "completed"
    messages = mesh.scripted.requests[-1]["messages"]
    assert history_problems(messages) == []
    assert messages[-2]["role"] == "assistant" and LONG.startswith(messages[-2]["content"])


async def test_cancel_rpc_stops_a_running_turn(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": LONG, "token_delay_ms": 30})
    async with ide(mesh, "cancel-rpc") as client:
        await client.send({"type": "user_message", "content": "talk"})
        await client.ws.recv()
        await mesh.client.runtime.Cancel(runtime_pb2.GetSessionRequest(session_id="cancel-rpc"))
        events = await client.until_done()
    assert events[-1]["status"] == "cancelled"


@pytest.mark.parametrize("policy", ["reject", "interrupt"])
async def test_busy_policy(mesh: Mesh, policy: str) -> None:
    await mesh.client.runtime.CreateSession(
        runtime_pb2.CreateSessionRequest(session_id=f"busy-{policy}", busy_policy=policy)
    )
    mesh.scripted.enqueue({"text": LONG, "token_delay_ms": 30}, {"text": "second answer"})
    async with ide(mesh, f"busy-{policy}") as client:
        await client.send({"type": "user_message", "content": "first"})
        await client.ws.recv()
        await client.send({"type": "user_message", "content": "second"})
        events = await client.until_done()
        if policy == "reject":
            assert "TURN_IN_PROGRESS" in [e["error_code"] for e in of(events, "error")]
            assert events[-1]["status"] == "completed"
            assert "second answer" not in text_of(events)
        else:
            assert events[-1]["status"] == "cancelled"
            second = await client.until_done()
            assert text_of(second) == "second answer"


async def test_an_unknown_busy_policy_is_refused(mesh: Mesh) -> None:
    import grpc

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.client.runtime.CreateSession(
            runtime_pb2.CreateSessionRequest(session_id="b", busy_policy="panic")
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_soft_deleted_sessions_are_purged_after_retention(mesh: Mesh) -> None:
    from services.orchestrator.state.store import SessionStore

    async with ide(mesh, "old") as client:
        await client.say("hi")
    store = SessionStore(mesh.pool)
    assert await store.soft_delete("old")
    assert await store.purge_deleted(older_than_days=1) == 0
    await mesh.pool.execute(
        "update orchestrator.sessions set deleted_at = now() - interval '2 days'"
    )
    assert await store.purge_deleted(older_than_days=1) == 1
    assert await mesh.pool.fetchval("select count(*) from orchestrator.events") == 0


async def test_a_decision_on_an_approval_hitl_already_expired_is_the_expiry(mesh: Mesh) -> None:
    """As when another replica's sweep expired it: the owner hears of it by a decision."""
    mesh.scripted.enqueue(
        calls(("write_file", {"path": "a.py", "content": "x"})), {"text": "I will not write it."}
    )
    async with ide(mesh, "expired-elsewhere") as client:
        ask = of(await client.say("write"), "tool_call")[0]
        await mesh.pool.execute(
            "update hitl.approvals set status = 'expired' where call_id = $1", ask["call_id"]
        )
        events = await client.decide(ask["call_id"], "reject")
    assert [e["error_code"] for e in of(events, "error")] == ["HITL_TIMEOUT"]
    assert text_of(events) == "I will not write it."
    tool = mesh.scripted.requests[-1]["messages"][-1]
    assert tool["role"] == "tool" and "HITL_TIMEOUT" in tool["content"]


async def test_a_replica_shutting_down_leaves_its_turn_for_another_not_cancelled(
    mesh: Mesh,
) -> None:
    """Stopping the process cancels its workers: that is not the user's cancel. The turn
    stays interrupted (another replica takes it over) and no `done: cancelled` is written."""
    mesh.scripted.enqueue({"text": LONG, "token_delay_ms": 30})
    async with ide(mesh, "shutdown") as client:
        await client.send({"type": "user_message", "content": "talk"})
        for _ in range(3):
            await client.ws.recv()
        await mesh.servers["orchestrator"].stop(0)
    store = SessionStore(mesh.pool)
    written = [pb.ServerEvent.FromString(raw) for _, raw in await store.events_after("shutdown", 0)]
    assert [e.done.status for e in written if e.WhichOneof("event") == "done"] == []
    assert "shutdown" in await store.interrupted_turns()
