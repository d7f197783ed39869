"""Client message ids: a repeat is applied once and answered ``done`` status ``duplicate``
naming the seq where the first delivery's events start; the claim is in Postgres."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest

from clients.cli.connection import Connection
from clients.python import MeshClient
from clients.python.ide import Event, IdeConnection, connect_ide
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.common.db import create_pool
from services.orchestrator import server as orchestrator
from tests.support.ide import ide, of, text_of
from tests.support.mesh import Mesh, running_mesh, wait_serving
from tests.support.sse import parse_sse


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


@pytest.fixture
async def agents(database_url: str) -> AsyncIterator[Mesh]:
    """Multi-agent mode: agent switches and plans."""
    async with running_mesh(database_url) as running:
        yield running


async def user_messages(client: MeshClient, session_id: str) -> list[str]:
    history = await client.runtime.GetHistory(runtime_pb2.GetHistoryRequest(session_id=session_id))
    return [m.content for m in history.messages if m.role == "user"]


async def test_a_resent_user_message_is_answered_as_a_duplicate_naming_its_first_seq(
    mesh: Mesh,
) -> None:
    mesh.scripted.enqueue({"text": "Answered once."})
    async with ide(mesh, "resend") as client:
        first = await client.say("do it", client_message_id="m-1")
        again = await client.say("do it", client_message_id="m-1")
    assert text_of(first) == "Answered once."
    assert [e["type"] for e in again] == ["done"]
    assert again[0]["status"] == "duplicate"
    assert again[0]["client_message_id"] == "m-1"
    assert again[0]["first_seq"] == first[0]["seq"]
    assert await user_messages(mesh.client, "resend") == ["do it"]
    # Replaying from there shows the first delivery's events.
    async with asyncio.timeout(10):
        stream = await mesh.client.open_stream("resend", last_seq=again[0]["first_seq"] - 1)
        async with stream:
            replayed = await stream.until_done()
    assert [e.seq for e in replayed] == [e["seq"] for e in first]


async def test_a_repeat_sent_while_the_first_still_waits_is_applied_once(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Only once.", "first_token_delay_ms": 50})
    message = pb.ClientMessage(
        client_message_id="fast-twice", user_message=pb.UserMessage(content="hello")
    )
    async with asyncio.timeout(20):
        async with await mesh.client.open_stream("twice") as stream:
            await stream.send(message)
            await stream.send(message)
            seen = await stream.until_done()
            seen += await stream.until_done()
    statuses = [e.done.status for e in seen if e.HasField("done")]
    assert sorted(statuses) == ["completed", "duplicate"]
    assert "".join(e.assistant_message.token for e in seen) == "Only once."
    assert await user_messages(mesh.client, "twice") == ["hello"]
    assert len(mesh.scripted.requests) == 1


async def test_a_claim_whose_delivery_died_before_it_started_lets_the_resend_apply(
    mesh: Mesh,
) -> None:
    # Its process died after the claim and before the message was stored: never applied.
    await mesh.client.runtime.CreateSession(runtime_pb2.CreateSessionRequest(session_id="died"))
    await mesh.pool.execute(
        "insert into orchestrator.client_messages (session_id, client_message_id, kind) "
        "values ('died', 'd-1', 'user_message')"
    )
    mesh.scripted.enqueue({"text": "Applied now."})
    async with ide(mesh, "died") as client:
        answered = await client.say("once", client_message_id="d-1")
        again = await client.say("once", client_message_id="d-1")
    assert text_of(answered) == "Applied now."
    assert again[-1]["status"] == "duplicate"
    assert await user_messages(mesh.client, "died") == ["once"]


async def test_the_claim_holds_across_a_runtime_restart(database_url: str) -> None:
    async with running_mesh(database_url, multi_agent_mode=False) as first:
        first.scripted.enqueue({"text": "Before the restart."})
        async with ide(first, "restarted") as client:
            answered = await client.say("once", client_message_id="r-1")
    async with running_mesh(database_url, multi_agent_mode=False) as second:
        async with ide(second, "restarted") as client:
            again = await client.say("once", client_message_id="r-1")
        assert again[-1]["status"] == "duplicate"
        assert again[-1]["first_seq"] == answered[0]["seq"]
        assert await user_messages(second.client, "restarted") == ["once"]
        assert second.scripted.requests == []


async def test_a_refused_message_does_not_block_its_resend(mesh: Mesh) -> None:
    await mesh.client.runtime.CreateSession(
        runtime_pb2.CreateSessionRequest(session_id="strict", busy_policy="reject")
    )
    mesh.scripted.enqueue({"text": "Slow " * 30, "token_delay_ms": 20}, {"text": "Second."})
    async with ide(mesh, "strict") as client:
        await client.send({"type": "user_message", "content": "first", "client_message_id": "a"})
        await client.ws.recv()  # the turn is running
        await client.send({"type": "user_message", "content": "second", "client_message_id": "b"})
        refused = await client.until_done()
        assert [e["error_code"] for e in of(refused, "error")] == ["TURN_IN_PROGRESS"]
        assert of(refused, "error")[0]["client_message_id"] == "b"
        applied = await client.say("second", client_message_id="b")
    assert text_of(applied) == "Second."
    assert await user_messages(mesh.client, "strict") == ["first", "second"]


async def test_rest_idempotency_key_applies_a_post_once(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Posted."})
    body = {"session_id": "rest-key", "message": "hello"}
    headers = {"Idempotency-Key": "post-1"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        first = await http.post("/agent/message", json=body, headers=headers)
        second = await http.post("/agent/message", json=body, headers=headers)
        too_long = await http.post(
            "/agent/message", json=body, headers={"Idempotency-Key": "x" * 201}
        )
    assert (first.status_code, first.json()["status"]) == (202, "accepted")
    assert (second.status_code, second.json()["status"]) == (202, "duplicate")
    assert too_long.status_code == 400
    assert too_long.json()["error_code"] == "MISSING_REQUIRED_FIELD"
    async with asyncio.timeout(10):
        async with await mesh.client.open_stream("rest-key", last_seq=0) as stream:
            while (await stream.until_done())[-1].done.status != "completed":
                pass  # the duplicate's `done` may come first
            assert await user_messages(mesh.client, "rest-key") == ["hello"]


async def test_v1_idempotency_key_replays_the_first_answer(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Opening."}, {"text": "The one answer."})
    async with httpx.AsyncClient(base_url=mesh.gateway_url + "/v1", timeout=20) as http:
        opened = await http.post(
            "/chat/completions",
            json={"model": "universal", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert opened.status_code == 200, opened.text
        session = opened.json()["session_id"]
        follow = {
            "model": "universal",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Opening."},
                {"role": "user", "content": "and then?"},
            ],
        }
        headers = {"X-CodeLab-Session": session, "Idempotency-Key": "v1-1"}
        first = await http.post("/chat/completions", json=follow, headers=headers)
        second = await http.post("/chat/completions", json=follow, headers=headers)
    answer = [r.json()["choices"][0]["message"]["content"] for r in (first, second)]
    assert answer == ["The one answer.", "The one answer."]
    assert await user_messages(mesh.client, session) == ["hi", "and then?"]
    assert len(mesh.scripted.requests) == 2


async def test_v1_idempotency_key_on_a_new_session_opens_it_once(mesh: Mesh) -> None:
    """A first request retried with its key (the answer was lost on the way) reaches the
    same new session and replays its answer: one session, one turn, one model call."""
    mesh.scripted.enqueue({"text": "Only once."})
    body = {"model": "universal", "messages": [{"role": "user", "content": "start"}]}
    async with httpx.AsyncClient(base_url=mesh.gateway_url + "/v1", timeout=20) as http:
        replies = [
            await http.post("/chat/completions", json=body, headers={"Idempotency-Key": key})
            for key in ("open-1", "open-1", "open-2")
        ]
    first, again, other = (r.json() for r in replies)
    assert first["session_id"] == again["session_id"] != other["session_id"]
    assert [first["choices"][0]["message"]["content"]] * 2 == [
        again["choices"][0]["message"]["content"],
        "Only once.",
    ]
    assert await user_messages(mesh.client, first["session_id"]) == ["start"]
    assert len([r for r in mesh.scripted.requests if r["messages"][-1]["content"] == "start"]) == 2


async def test_a_bad_client_message_id_is_refused_with_its_code(mesh: Mesh) -> None:
    async with ide(mesh, "bad-id") as client:
        await client.send({"type": "user_message", "content": "x", "client_message_id": 7})
        told = json.loads(await client.ws.recv())
    assert (told["type"], told["error_code"]) == ("error", "MISSING_REQUIRED_FIELD")


async def test_the_python_client_gives_every_message_an_id(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Once."})
    message = pb.ClientMessage(user_message=pb.UserMessage(content="resent as is"))
    async with asyncio.timeout(20):
        async with await mesh.client.open_stream("client-ids") as stream:
            await stream.send(message)
            await stream.send(message)  # the same object: the same id
            seen = await stream.until_done()
            seen += await stream.until_done()
    assert message.client_message_id
    assert sorted(e.done.status for e in seen if e.HasField("done")) == ["completed", "duplicate"]


async def test_the_gateway_adds_no_id_to_an_ide_message_without_one(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "One."}, {"text": "Two."})
    async with ide(mesh, "no-ids") as client:
        first = await client.say("same text")
        second = await client.say("same text")
    assert (text_of(first), text_of(second)) == ("One.", "Two.")
    assert await user_messages(mesh.client, "no-ids") == ["same text", "same text"]


async def logged(mesh: Mesh, session_id: str, kind: str) -> list[pb.ServerEvent]:
    """The session's logged events of one type, in seq order."""
    rows = await mesh.pool.fetch(
        "select event from orchestrator.events where session_id = $1 and type = $2 order by seq",
        session_id,
        kind,
    )
    return [pb.ServerEvent.FromString(row["event"]) for row in rows]


async def test_a_repeated_switch_agent_switches_once(agents: Mesh) -> None:
    mesh = agents
    switch = {"type": "switch_agent", "agent_type": "ask", "client_message_id": "sw-1"}
    async with ide(mesh, "switch-twice") as client:
        first = await client.turn(switch)
        again = await client.turn(switch)
    assert [e["to_agent"] for e in of(first, "agent_switched")] == ["ask"]
    assert (again[-1]["status"], again[-1]["first_seq"]) == ("duplicate", first[0]["seq"])
    assert len(await logged(mesh, "switch-twice", "agent_switched")) == 1
    switches = await mesh.pool.fetchval(
        "select switch_count from orchestrator.sessions where session_id = 'switch-twice'"
    )
    assert switches == 1


async def test_a_repeated_cancel_cancels_one_turn(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Slow " * 60, "token_delay_ms": 20}, {"text": "Next."})
    cancel = {"type": "cancel", "client_message_id": "c-1"}
    async with ide(mesh, "cancel-twice") as client:
        await client.send({"type": "user_message", "content": "talk"})
        await client.ws.recv()  # the turn is running
        await client.send(cancel)
        await client.send(cancel)
        seen = await client.until_done()
        seen += await client.until_done()
        later = await client.turn(cancel)  # after the turn, too
        after = await client.say("again")
    assert sorted(e["status"] for e in of(seen, "done")) == ["cancelled", "duplicate"]
    (duplicate,) = [e for e in of(seen, "done") if e["status"] == "duplicate"]
    assert [(e["status"], e["first_seq"]) for e in later] == [("duplicate", duplicate["first_seq"])]
    assert text_of(after) == "Next."
    statuses = [e.done.status for e in await logged(mesh, "cancel-twice", "done")]
    assert statuses.count("cancelled") == 1


async def test_a_repeated_plan_decision_decides_the_plan_once(agents: Mesh) -> None:
    mesh = agents
    plan = {
        "goal": "Tidy up",
        "subtasks": [{"description": "Write it", "agent": "coder", "estimated_time": "5 min"}],
    }
    mesh.scripted.enqueue({"tool_calls": [{"name": "create_plan", "arguments": plan}]})
    async with ide(mesh, "plan-twice") as client:
        proposed = await client.say("tidy everything", agent_type="coder")
        (request,) = of(proposed, "plan_approval_required")
        decision = {
            "type": "plan_decision",
            "decision": "reject",
            "approval_request_id": request["approval_request_id"],
            "feedback": "not now",
            "client_message_id": "p-1",
        }
        await client.send(decision)
        await client.send(decision)
        seen = await client.until_done()
        seen += await client.until_done()
    assert sorted(e["status"] for e in of(seen, "done")) == ["completed", "duplicate"]
    assert of(seen, "error") == []
    assert len(await logged(mesh, "plan-twice", "plan_rejected")) == 1
    audit = await mesh.pool.fetch(
        "select decision from hitl.audit_log where event_type = 'plan_decision'"
    )
    assert [r["decision"] for r in audit] == ["plan_reject"]


async def test_a_repeat_reaching_another_replica_is_applied_once(
    mesh: Mesh, database_url: str
) -> None:
    pool = await create_pool(database_url)
    replica, port = await orchestrator.build(mesh.settings, pool, "127.0.0.1:0")
    await replica.start()
    client_b = MeshClient.from_settings(
        dataclasses.replace(mesh.settings, orchestrator_addr=f"127.0.0.1:{port}")
    )
    message = pb.ClientMessage(
        client_message_id="two-replicas", user_message=pb.UserMessage(content="once")
    )
    mesh.scripted.enqueue({"text": "Answered by the owner."})
    try:
        await wait_serving(client_b)
        async with asyncio.timeout(20):
            stream_a = await mesh.client.open_stream("replicas")
            stream_b = await client_b.open_stream("replicas")
            async with stream_a, stream_b:
                await stream_a.send(message)  # replica A owns the session from here
                first = await stream_a.until_done()
                await stream_b.until_done()
                await stream_b.send(message)  # B relays the repeat to A
                again = await stream_b.until_done()
    finally:
        await client_b.close()
        await replica.stop(0)
        await pool.close()
    assert first[-1].done.status == "completed"
    assert (again[-1].done.status, again[-1].done.first_seq) == ("duplicate", first[0].seq)
    assert await user_messages(mesh.client, "replicas") == ["once"]
    assert len(mesh.scripted.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"session_id": "sse-002", "message": {"type": "user_message", "content": "hi"}},
        {"session_id": "sse-000", "message": "hi", "message_type": "user_message"},
    ],
)
async def test_a_duplicate_through_the_sse_stream_is_answered_not_applied(
    mesh: Mesh, body: dict[str, object]
) -> None:
    mesh.scripted.enqueue({"text": "Streamed once.", "first_token_delay_ms": 500})  # heartbeats
    body = {**body, "client_message_id": "sse-1"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        replies = [await http.post("/agent/message/stream", json=body) for _ in range(2)]
    first, again = (
        [json.loads(d) for e, d in parse_sse(r.text) if e != "comment"] for r in replies
    )
    assert "".join(e.get("token", "") for e in first) == "Streamed once."
    assert first[-1]["status"] == "completed"
    assert [(e["type"], e["status"]) for e in again] == [("done", "duplicate")]
    assert again[0]["first_seq"] == first[0]["seq"]
    session = str(body["session_id"])
    assert await user_messages(mesh.client, session) == ["hi"]
    assert len(mesh.scripted.requests) == 1


async def test_the_ide_client_resends_a_message_with_the_id_it_first_had(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Once."})
    client = await connect_ide(mesh.gateway_url, "ide-resend")
    try:
        message = {"type": "user_message", "content": "resent as is"}
        sent = await client.send(message)
        first = await client.until_done()
        await client.send(message)  # the same dict: the same id
        again = await client.until_done()
        await client.user_message("resent as is", client_message_id=sent["client_message_id"])
        third = await client.until_done()
    finally:
        await client.close()
    assert text_of(first) == "Once." and sent is message
    for repeat in (again, third):
        assert [(e["type"], e["status"]) for e in repeat] == [("done", "duplicate")]
        assert repeat[0]["first_seq"] == first[0]["seq"]
    assert await user_messages(mesh.client, "ide-resend") == ["resent as is"]


async def test_the_cli_resends_after_a_drop_with_the_id_it_first_went_out_with(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first send lands (its turn runs to the end), then the socket drops before the
    sender learns it did: the CLI resumes and resends, with the same id, and the runtime
    answers the resend as a duplicate."""
    attempts: list[dict[str, Any]] = []
    send = IdeConnection.send

    async def lands_then_drops(ide: IdeConnection, message: Mapping[str, Any]) -> Event:
        sent = await send(ide, message)
        attempts.append(dict(sent))
        if len(attempts) == 1:
            await ide.until_done()  # landed; the CLI replays these events after the resume
            ide.ws.transport.abort()
            await ide.ws.wait_closed()
            await ide.ws.send("{}")  # ConnectionClosed, as a send cut mid-way raises
        return sent

    monkeypatch.setattr(IdeConnection, "send", lands_then_drops)
    mesh.scripted.enqueue({"text": "Applied once."})
    connection = Connection(mesh.gateway_url, "cli-resend")
    await connection.open(replay_after=0)
    try:
        await connection.send({"type": "user_message", "content": "land once"})
        statuses: list[str] = []
        async with asyncio.timeout(20):
            while len(statuses) < 2:
                event = await connection.next_event()
                statuses += [str(event["status"])] if event["type"] == "done" else []
    finally:
        await connection.close()
    assert connection.reconnects == 1
    assert [a["content"] for a in attempts] == ["land once"] * 2
    assert attempts[0]["client_message_id"] == attempts[1]["client_message_id"]
    assert sorted(statuses) == ["completed", "duplicate"]
    assert await user_messages(mesh.client, "cli-resend") == ["land once"]
    assert len(mesh.scripted.requests) == 1
