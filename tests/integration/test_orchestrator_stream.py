"""The Stream RPC end to end through real gRPC, real Postgres and the scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import pytest

from clients.python import SessionStream
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.common.channels import error_code
from services.orchestrator.session import runtime
from services.orchestrator.state.store import SessionStore, StoredMessage
from tests.support.mesh import Mesh, running_mesh


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """Single-agent mode: these tests are about transport, not routing."""
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


def user(text: str) -> pb.ClientMessage:
    return pb.ClientMessage(user_message=pb.UserMessage(content=text, role="user"))


def kinds(events: list[pb.ServerEvent]) -> list[str]:
    return [e.WhichOneof("event") or "" for e in events]


async def test_turn_streams_tokens_then_done_with_monotonic_seq(mesh: Mesh) -> None:
    # Paced: chunks that arrive together may go as one token event (coalescing).
    mesh.scripted.enqueue({"text": "Hello from the scripted model, friend.", "token_delay_ms": 10})
    async with await mesh.client.open_stream("s-turn") as stream:
        await stream.send(user("say hello"))
        events = await stream.until_done()

    assert kinds(events)[-2:] == ["assistant_message", "done"]
    tokens = [e.assistant_message.token for e in events if e.assistant_message.token]
    assert len(tokens) > 1
    assert "".join(tokens) == "Hello from the scripted model, friend."
    assert events[-2].assistant_message.is_final and not events[0].assistant_message.is_final
    assert events[-1].done.status == "completed"
    assert {e.session_id for e in events} == {"s-turn"}
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert all(e.timestamp for e in events)


async def test_upstream_is_called_with_stream_true(mesh: Mesh) -> None:
    mesh.scripted.clear_requests()
    async with await mesh.client.open_stream("s-upstream") as stream:
        await stream.send(user("hi"))
        await stream.until_done()
    (request,) = mesh.scripted.requests
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1] == {"role": "user", "content": "hi"}


async def test_history_and_sessions_are_persisted(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Stored answer.", "token_delay_ms": 10})
    async with await mesh.client.open_stream("s-history", user_id="alice") as stream:
        await stream.send(user("remember this"))
        await stream.until_done()

    history = await mesh.client.runtime.GetHistory(
        runtime_pb2.GetHistoryRequest(session_id="s-history", user_id="alice")
    )
    assert [(m.role, m.content) for m in history.messages] == [
        ("user", "remember this"),
        ("assistant", "Stored answer."),
    ]
    row = await mesh.pool.fetchrow(
        "select count(*) as n from orchestrator.events where session_id = 's-history'"
    )
    assert row["n"] > 3
    listed = await mesh.client.runtime.ListSessions(
        runtime_pb2.ListSessionsRequest(user_id="alice")
    )
    assert [s.session_id for s in listed.sessions] == ["s-history"]
    assert listed.sessions[0].message_count == 2

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.client.runtime.GetHistory(
            runtime_pb2.GetHistoryRequest(session_id="s-history", user_id="mallory")
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_code(caught.value) == "SESSION_NOT_FOUND"


async def test_second_turn_sees_first_turn_in_prompt(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "First."}, {"text": "Second."})
    async with await mesh.client.open_stream("s-two") as stream:
        await stream.send(user("one"))
        await stream.until_done()
        await stream.send(user("two"))
        await stream.until_done()
    last = mesh.scripted.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert last[2]["content"] == "First."


async def test_a_slow_history_read_does_not_see_the_message_of_its_own_turn(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history is read beside the turn's start while the user's message is written:
    however late the read, the message is in the prompt once."""
    read = SessionStore.context

    async def slow(self: SessionStore, session_id: str) -> list[StoredMessage]:
        await asyncio.sleep(0.3)  # the message's write would land before this read
        return await read(self, session_id)

    monkeypatch.setattr(SessionStore, "context", slow)
    mesh.scripted.enqueue({"text": "First."}, {"text": "Second."})
    async with await mesh.client.open_stream("s-slow-read") as stream:
        await stream.send(user("one"))
        await stream.until_done()
        await stream.send(user("two"))
        await stream.until_done()
    last = mesh.scripted.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in last[1:]] == [
        ("user", "one"),
        ("assistant", "First."),
        ("user", "two"),
    ]


async def test_messages_during_a_turn_are_queued_not_interleaved(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {"text": "alpha beta gamma delta", "token_delay_ms": 20},
        {"text": "one two three four", "token_delay_ms": 20},
    )
    async with await mesh.client.open_stream("s-queue") as stream:
        await stream.send(user("first"))
        await stream.send(user("second"))
        first = await stream.until_done()
        second = await stream.until_done()
    ids_first = {e.assistant_message.message_id for e in first if e.HasField("assistant_message")}
    ids_second = {e.assistant_message.message_id for e in second if e.HasField("assistant_message")}
    assert len(ids_first) == 1 and len(ids_second) == 1 and ids_first != ids_second
    text = "".join(e.assistant_message.token for e in second if e.HasField("assistant_message"))
    assert text == "one two three four"


async def test_cancel_stops_the_turn_and_keeps_what_was_said(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": " ".join(["word"] * 200), "token_delay_ms": 30})
    async with await mesh.client.open_stream("s-cancel") as stream:
        await stream.send(user("talk for a long time"))
        seen: list[pb.ServerEvent] = []
        async for event in stream:
            seen.append(event)
            if len(seen) == 3:
                await stream.send(pb.ClientMessage(cancel=pb.Cancel()))
            if event.HasField("done"):
                break
    assert seen[-1].done.status == "cancelled"
    history = await mesh.client.runtime.GetHistory(
        runtime_pb2.GetHistoryRequest(session_id="s-cancel")
    )
    assert history.messages[-1].role == "assistant"
    assert 0 < len(history.messages[-1].content) < len(" ".join(["word"] * 200))


async def test_replay_after_last_seq_returns_each_event_once(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-replay") as stream:
        await stream.send(user("hello"))
        live = await stream.until_done()
    cut = live[0].seq
    async with await mesh.client.open_stream("s-replay", last_seq=cut) as stream:
        replayed = await stream.until_done()
    assert [e.seq for e in replayed] == [e.seq for e in live if e.seq > cut]
    assert [e.SerializeToString() for e in replayed] == [
        e.SerializeToString() for e in live if e.seq > cut
    ]


async def test_empty_content_is_an_error_event_and_the_session_goes_on(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-empty") as stream:
        await stream.send(user("   "))
        failed = await stream.until_done()
        await stream.send(user("now a real question"))
        ok = await stream.until_done()
    assert failed[0].error.error_code == pb.MISSING_REQUIRED_FIELD
    assert ok[-1].done.status == "completed"


@pytest.mark.parametrize("details", ["{", "[1, 2]", '{"limit": "x"}'])
async def test_a_rejection_with_any_details_is_reported_not_crashed(
    mesh: Mesh, details: str
) -> None:
    rejected = pb.ClientMessage(
        rejected=pb.Rejected(
            error_code=pb.INVALID_MESSAGE, content="not a message", details_json=details
        )
    )
    async with await mesh.client.open_stream("s-rejected") as stream:
        await stream.send(rejected)
        (event,) = [e async for e in until_error(stream)]
    assert pb.ErrorCode.Name(event.error.error_code) == "INVALID_MESSAGE"
    parsed = json.loads(event.error.details_json) if event.error.HasField("details_json") else None
    assert parsed == (json.loads(details) if details.startswith('{"') else None)


async def until_error(stream: SessionStream) -> AsyncIterator[pb.ServerEvent]:
    async for event in stream:
        if event.HasField("error"):
            yield event
            return


async def test_stream_must_start_with_attach(mesh: Mesh) -> None:
    call = mesh.client.runtime.Stream()
    await call.write(user("no attach"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(caught.value) == "MISSING_REQUIRED_FIELD"


async def test_a_message_right_behind_a_refused_attach_is_never_applied(mesh: Mesh) -> None:
    # The message is read while the attach is checked: it must wait for the check's answer.
    mesh.scripted.enqueue({"text": "Alice's answer."})
    async with await mesh.client.open_stream("s-alice", user_id="alice") as stream:
        await stream.send(user("mine"))
        await stream.until_done()
    mesh.scripted.clear_requests()

    call = mesh.client.runtime.Stream()
    await call.write(pb.ClientMessage(attach=pb.Attach(session_id="s-alice", user_id="mallory")))
    await call.write(user("not yours"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_code(caught.value) == "SESSION_NOT_FOUND"

    await asyncio.sleep(0.2)  # a message wrongly applied would reach the model by now
    assert mesh.scripted.requests == []
    history = await mesh.client.runtime.GetHistory(
        runtime_pb2.GetHistoryRequest(session_id="s-alice", user_id="alice")
    )
    assert [m.content for m in history.messages] == ["mine", "Alice's answer."]


async def test_a_first_message_riding_a_refused_attach_sends_none_of_the_session(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream naming someone else's idle session with a title and a first message: what
    goes to the model early for it (a new session's guess) holds nothing of that session
    (its last turn is the guess for its next), and is cancelled with the refused attach."""
    monkeypatch.setattr(runtime, "IDLE_SECONDS", 0.05)  # alice's worker ends: no one serves it
    mesh.scripted.enqueue({"text": "Alice's answer."})
    said = pb.ClientMessage(user_message=pb.UserMessage(content="mine", agent_type="coder"))
    async with await mesh.client.open_stream("s-alice", user_id="alice") as stream:
        await stream.send(said)
        await stream.until_done()
    await asyncio.sleep(0.3)
    mesh.scripted.clear_requests()

    hijack = pb.ClientMessage(user_message=pb.UserMessage(content="yours", agent_type="coder"))
    stream = await mesh.client.open_stream(
        "s-alice", user_id="mallory", title="hijack", first=hijack
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream.until_done()
    assert error_code(caught.value) == "SESSION_NOT_FOUND"
    await asyncio.sleep(0.2)  # a request sent for it would have reached the model by now
    sent = [m["content"] for body in mesh.scripted.requests for m in body["messages"]]
    assert "mine" not in sent and "Alice's answer." not in sent


async def test_an_attach_carrying_an_attach_is_refused(mesh: Mesh) -> None:
    nested = pb.ClientMessage(attach=pb.Attach(session_id="s-nested"))
    stream = await mesh.client.open_stream("s-nested", first=nested)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream.until_done()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(caught.value) == "MISSING_REQUIRED_FIELD"


@pytest.mark.parametrize(
    ("scenario", "code"),
    [
        ({"error": {"status": 400, "message": "bad request"}}, "LLM_ERROR"),
        # llmproxy's 3 calls, twice: the in-turn retry (tests/support/mesh.py) also fails.
        ({"error": {"status": 503, "message": "overloaded"}, "times": 6}, "LLM_PROXY_UNAVAILABLE"),
        (
            {"text": "partial answer then the line drops", "disconnect_after_chunks": 4},
            "LLM_STREAM_INTERRUPTED",
        ),
    ],
)
async def test_llm_failures_become_error_events(
    mesh: Mesh, scenario: dict[str, object], code: str
) -> None:
    mesh.scripted.enqueue(scenario)
    async with await mesh.client.open_stream("s-fail") as stream:
        await stream.send(user("trigger"))
        events = await stream.until_done()
        errors = [e.error for e in events if e.HasField("error")]
        assert [pb.ErrorCode.Name(e.error_code) for e in errors] == [code]
        assert events[-1].done.status == "error"
        mesh.scripted.enqueue({"text": "Recovered."})
        await stream.send(user("again"))
        after = await stream.until_done()
    assert after[-1].done.status == "completed"


async def test_a_model_call_failing_before_its_first_token_is_retried_in_the_turn(
    mesh: Mesh,
) -> None:
    mesh.scripted.clear_requests()
    # llmproxy gives up after its 3 calls; the orchestrator tries once more and it works.
    mesh.scripted.enqueue(
        {"error": {"status": 503, "message": "overloaded"}, "times": 3}, {"text": "Got there."}
    )
    async with await mesh.client.open_stream("s-turn-retry") as stream:
        await stream.send(user("hi"))
        events = await stream.until_done()
    assert [e for e in events if e.HasField("error")] == []
    assert "".join(e.assistant_message.token for e in events) == "Got there."
    assert events[-1].done.status == "completed"
    assert len(mesh.scripted.requests) == 4


async def test_retry_before_first_token_hides_a_transient_429(mesh: Mesh) -> None:
    mesh.scripted.clear_requests()
    mesh.scripted.enqueue({"error": {"status": 429, "message": "slow down"}}, {"text": "Fine."})
    async with await mesh.client.open_stream("s-retry") as stream:
        await stream.send(user("hi"))
        events = await stream.until_done()
    assert events[-1].done.status == "completed"
    assert len(mesh.scripted.requests) == 2


async def test_details_of_an_error_event_are_json(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"error": {"status": 400, "message": "bad"}})
    async with await mesh.client.open_stream("s-details") as stream:
        await stream.send(user("x"))
        events = await stream.until_done()
    error = next(e.error for e in events if e.HasField("error"))
    if error.HasField("details_json"):
        assert isinstance(json.loads(error.details_json), dict)
    assert "400" in error.content


async def test_orchestrator_health_follows_llmproxy(mesh: Mesh) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel = grpc.aio.insecure_channel(mesh.settings.orchestrator_addr)
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        await mesh.servers["llmproxy"].stop(0)
        async with asyncio.timeout(10):
            while True:
                reply = await stub.Check(health_pb2.HealthCheckRequest())
                if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
                await asyncio.sleep(0.1)
    finally:
        await channel.close()


async def test_an_edit_whose_arguments_are_not_json_is_invalid_decision(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.py", "content": "x"}}]}
    )
    async with await mesh.client.open_stream("s-bad-edit") as stream:
        await stream.send(user("write a.py"))
        asked = await stream.until_done()
        assert asked[-1].done.status == "awaiting_approval"
        call_id = next(e.tool_call.call_id for e in asked if e.HasField("tool_call"))
        edit = pb.HitlDecision(
            call_id=call_id, decision=pb.DECISION_EDIT, modified_arguments_json="{not json"
        )
        await stream.send(pb.ClientMessage(hitl_decision=edit))
        refused = await stream.until_done()
    errors = [e.error for e in refused if e.HasField("error")]
    assert [pb.ErrorCode.Name(e.error_code) for e in errors] == ["INVALID_DECISION"]
    assert refused[-1].done.status == "awaiting_approval"  # the approval still waits


async def test_two_cancels_back_to_back_each_get_their_done(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-two-cancels") as stream:
        for _ in range(5):  # the second arrives while the first is being handled
            await stream.send(pb.ClientMessage(cancel=pb.Cancel()))
            await stream.send(pb.ClientMessage(cancel=pb.Cancel()))
            first = await asyncio.wait_for(stream.until_done(), 20)
            second = await asyncio.wait_for(stream.until_done(), 20)
            assert [first[-1].done.status, second[-1].done.status] == ["cancelled", "cancelled"]
