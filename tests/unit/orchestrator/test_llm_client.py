"""The orchestrator's llmproxy client against a real gRPC llmproxy that plays scripted
replies: chunks become plain values, failures carry the spec's code, and a call is retried
only while nothing of it was shown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from codelab.v1 import llmproxy_pb2 as pb
from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common.channels import internal_channel
from services.common.errors import ServiceError
from services.common.model_stream import (
    ModelFinished,
    ModelOutput,
    ModelToolCall,
    ReasoningPiece,
    TextPiece,
)
from services.llmproxy.errors import (
    LlmContextExceeded,
    LlmError,
    LlmStreamInterrupted,
    LlmTimeout,
    LlmUnavailable,
)
from services.orchestrator.errors import LlmFailure
from services.orchestrator.peers import llm as llm_module
from services.orchestrator.peers import shared_calls
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.toolbox import ToolSpec
from tests.support.llm_proxy import (
    Reply,
    ScriptedProxy,
    finish,
    scripted_llm,
    scripted_replicas,
    text,
)
from tests.support.mesh import INTERNAL_KEY

HELLO = [StoredMessage("user", "hello")]
S = grpc.StatusCode


SHARING = pytest.mark.parametrize("shared", [False, True], ids=["new-call", "shared-call"])


@pytest.fixture(params=[False, True], ids=["new-call", "shared-call"])
async def llm(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ScriptedProxy, LlmClient]]:
    """Each behaviour holds for a call opened for the request and a shared call."""
    async with scripted_llm(shared=request.param) as running:
        yield running


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_module, "TURN_BACKOFF", 0.01)


async def answer(client: LlmClient, purpose: str = "turn") -> list[ModelOutput]:
    return [out async for out in client.complete("s1", HELLO, purpose=purpose)]


async def failure(client: LlmClient, purpose: str = "turn") -> LlmFailure:
    with pytest.raises(LlmFailure) as failed:
        await answer(client, purpose)
    return failed.value


async def test_chunks_become_plain_values_in_order(llm: tuple[ScriptedProxy, LlmClient]) -> None:
    proxy, client = llm
    call = pb.LlmToolCall(id="c1", name="read_file", arguments_json='{"path": "a"')
    proxy.play(
        Reply(
            [
                pb.CompleteChunk(reasoning_delta="think"),
                text("Hel"),
                text("lo"),
                pb.CompleteChunk(tool_call=call),
                finish("tool_calls", 11, 5),
            ]
        )
    )
    outputs = await answer(client)
    # Text that waited may come joined (a shared call batches what is ready together).
    pieces = [out for out in outputs if isinstance(out, TextPiece)]
    assert "".join(p.text for p in pieces) == "Hello" and 1 <= len(pieces) <= 2
    assert [out for out in outputs if not isinstance(out, TextPiece)] == [
        ReasoningPiece("think"),
        ModelToolCall("c1", "read_file", '{"path": "a"'),  # exactly as produced
        ModelFinished("tool_calls", 11, 5, "m-1"),
    ]
    assert outputs.index(pieces[0]) == 1 and outputs.index(pieces[-1]) == len(pieces)


async def test_the_request_carries_history_tools_and_options(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    history = [
        StoredMessage("system", "be brief"),
        StoredMessage("user", "read a", name="ann"),
        StoredMessage(
            "assistant",
            "",
            name="coder",
            tool_calls=[{"id": "c1", "name": "read_file", "arguments": '{"path":"a"}'}],
            reasoning="a first",
        ),
        StoredMessage("tool", "text of a", name="read_file", tool_call_id="c1"),
    ]
    tool = ToolSpec("read_file", "reads", {"type": "object", "properties": {}}, "ide")
    stream = client.complete(
        "s1",
        history,
        tools=[tool],
        temperature=0.2,
        max_tokens=99,
        model="gpt-x",
        with_reasoning=True,
        upstream_seconds=12.5,
    )
    _ = [out async for out in stream]
    _ = [out async for out in client.complete("s2", history, purpose="classification")]
    full, bare = proxy.requests
    assert (full.session_id, full.purpose, full.model) == ("s1", "turn", "gpt-x")
    assert (full.temperature, full.max_tokens, full.timeout_seconds) == (0.2, 99, 12.5)
    assert [(t.name, t.description, t.parameters_json) for t in full.tools] == [
        ("read_file", "reads", '{"type": "object", "properties": {}}')
    ]
    system, user, assistant, result = full.messages
    assert (system.role, system.content, system.HasField("name")) == ("system", "be brief", False)
    assert user.name == "ann"
    assert not assistant.HasField("name")  # an assistant's name is not sent
    assert [(c.id, c.name, c.arguments_json) for c in assistant.tool_calls] == [
        ("c1", "read_file", '{"path":"a"}')
    ]
    assert assistant.reasoning == "a first"
    assert (result.tool_call_id, result.name, result.content) == ("c1", "read_file", "text of a")
    assert (bare.purpose, bare.model, bare.timeout_seconds) == ("classification", "", 0)
    assert not bare.HasField("temperature") and not bare.HasField("max_tokens")
    assert not bare.messages[2].HasField("reasoning") and not bare.tools


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply((), LlmTimeout("upstream slow")), "LLM_TIMEOUT"),
        (Reply((), LlmError("upstream said 400")), "LLM_ERROR"),
        (Reply((), LlmContextExceeded("too long")), "LLM_CONTEXT_LENGTH_EXCEEDED"),
        (Reply((), status=S.DEADLINE_EXCEEDED), "LLM_TIMEOUT"),
        (Reply((), status=S.ABORTED), "LLM_STREAM_INTERRUPTED"),
        (Reply((), status=S.PERMISSION_DENIED), "LLM_ERROR"),
    ],
)
async def test_a_verdict_is_reported_with_its_code_and_not_retried(
    llm: tuple[ScriptedProxy, LlmClient], reply: Reply, code: str
) -> None:
    proxy, client = llm
    proxy.play(reply)
    failed = await failure(client)
    assert failed.code == code
    expected = reply.error.message if reply.error else "llmproxy failed"
    assert failed.message == expected
    assert len(proxy.requests) == 1


@pytest.mark.parametrize("cause", [LlmUnavailable("503 twice"), LlmStreamInterrupted("cut")])
async def test_a_failure_before_the_first_token_is_retried_in_the_turn(
    llm: tuple[ScriptedProxy, LlmClient], cause: ServiceError
) -> None:
    proxy, client = llm
    proxy.play(Reply((), cause), Reply((), cause))
    assert await answer(client) == [TextPiece("ok"), ModelFinished("stop", 7, 3, "m-1")]
    assert len(proxy.requests) == 3


async def test_retries_stop_at_the_turn_budget() -> None:
    async with scripted_llm(turn_retries=1) as (proxy, client):
        proxy.play(*(Reply((), LlmUnavailable("down")) for _ in range(3)))
        assert (await failure(client)).code == "LLM_PROXY_UNAVAILABLE"
        assert len(proxy.requests) == 2


async def test_a_classification_is_not_retried(llm: tuple[ScriptedProxy, LlmClient]) -> None:
    proxy, client = llm
    proxy.play(Reply((), LlmUnavailable("down")))
    assert (await failure(client, "classification")).code == "LLM_PROXY_UNAVAILABLE"
    assert len(proxy.requests) == 1


@pytest.mark.parametrize(
    ("cause", "code"),
    [
        (LlmUnavailable("connection reset"), "LLM_STREAM_INTERRUPTED"),
        (LlmError("upstream 500"), "LLM_ERROR"),
    ],
)
async def test_a_failure_after_the_first_token_is_never_retried(
    llm: tuple[ScriptedProxy, LlmClient], cause: ServiceError, code: str
) -> None:
    proxy, client = llm
    proxy.play(Reply([text("par")], cause))
    seen: list[ModelOutput] = []
    with pytest.raises(LlmFailure) as failed:
        async for out in client.complete("s1", HELLO):
            seen.append(out)
    assert seen == [TextPiece("par")]
    assert failed.value.code == code
    assert len(proxy.requests) == 1


@SHARING
async def test_llmproxy_restarting_is_retried_on_its_own_budget(shared: bool) -> None:
    async with scripted_llm(turn_retries=0, shared=shared) as (proxy, client):
        proxy.play(Reply((), status=S.UNAVAILABLE), Reply((), status=S.INTERNAL))
        assert (await answer(client))[0] == TextPiece("ok")
        assert len(proxy.requests) == 3


@SHARING
async def test_an_unreachable_llmproxy_is_llm_proxy_unavailable(
    monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    monkeypatch.setattr(llm_module, "RESTART_ATTEMPTS", 2)
    channel = internal_channel("127.0.0.1:1", INTERNAL_KEY)
    stub: pb_grpc.LlmProxyAsyncStub = pb_grpc.LlmProxyStub(channel)  # type: ignore[assignment]
    client = LlmClient(stub, deadline=5, shared=int(shared))
    try:
        assert (await failure(client)).code == "LLM_PROXY_UNAVAILABLE"
    finally:
        await client.close()
        await channel.close()


@SHARING
async def test_no_answer_within_the_deadline_is_llm_timeout(shared: bool) -> None:
    async with scripted_llm(deadline=0.3, shared=shared) as (proxy, client):
        proxy.play(Reply((), hold=3))
        assert (await failure(client)).code == "LLM_TIMEOUT"
        assert len(proxy.requests) == 1
        await asyncio.wait_for(proxy.cancelled.wait(), 2)  # and llmproxy stops it


@SHARING
async def test_what_came_before_the_deadline_is_read_then_the_call_is_out_of_time(
    shared: bool,
) -> None:
    async with scripted_llm(deadline=0.3, shared=shared) as (proxy, client):
        proxy.play(Reply([text("first")], hold=3))
        stream = client.complete("s1", HELLO)
        assert await anext(stream) == TextPiece("first")
        with pytest.raises(LlmFailure) as failed:
            await anext(stream)
        assert failed.value.code == "LLM_TIMEOUT"
        await asyncio.wait_for(proxy.cancelled.wait(), 2)  # and llmproxy stops it


async def test_leaving_the_stream_early_cancels_the_call(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    proxy.play(Reply([text("first")], hold=30))
    stream = client.complete("s1", HELLO)
    assert await anext(stream) == TextPiece("first")
    await stream.aclose()  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await proxy.cancelled.wait()


async def test_sent_is_called_once_before_the_first_piece_and_not_on_retries(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    proxy.play(Reply((), LlmUnavailable("503 once")))
    seen: list[str] = []
    async for out in client.complete("s1", HELLO, sent=lambda: seen.append("sent")):
        seen.append(type(out).__name__)
    assert seen == ["sent", "TextPiece", "ModelFinished"]
    assert len(proxy.requests) == 2  # the retry did not call it again


async def test_a_shared_call_carries_every_request() -> None:
    async with scripted_llm(shared=True) as (proxy, client):
        assert await answer(client) == [TextPiece("ok"), ModelFinished("stop", 7, 3, "m-1")]
        proxy.play(Reply([text("slow")], hold=0.2), Reply([text("quick")]))
        slow, quick = await asyncio.gather(answer(client), answer(client))
        assert (slow[0], quick[0]) == (TextPiece("slow"), TextPiece("quick"))
        assert proxy.shared_calls == 1  # the three went on the one call, two at once
        assert [r.messages[0].content for r in proxy.shared] == ["hello"] * 3
        assert proxy.shared == proxy.requests


async def test_a_shared_call_that_was_lost_is_replaced_by_a_new_one_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No restart retries: the answer can only come from asking again on a new call.
    monkeypatch.setattr(llm_module, "RESTART_ATTEMPTS", 1)
    async with scripted_llm(shared=True, turn_retries=0) as (proxy, client):
        proxy.refuse_shared = 1
        seen: list[str] = []
        async for out in client.complete("s1", HELLO, sent=lambda: seen.append("sent")):
            seen.append(type(out).__name__)
        assert seen == ["sent", "TextPiece", "ModelFinished"]
        assert proxy.shared_calls == 2
        assert len(proxy.shared) == 2  # the first refused before it reached Complete
        assert len(proxy.requests) == 1  # the new call's


async def test_a_request_failing_alone_leaves_the_shared_call_to_the_others() -> None:
    async with scripted_llm(shared=True, turn_retries=0) as (proxy, client):
        proxy.play(Reply((), LlmContextExceeded("too long")))
        assert (await failure(client)).code == "LLM_CONTEXT_LENGTH_EXCEEDED"
        assert (await answer(client))[0] == TextPiece("ok")
        assert proxy.shared_calls == 1


async def test_without_a_shared_call_a_lost_call_is_llm_proxy_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(llm_module, "RESTART_ATTEMPTS", 1)
    async with scripted_llm(turn_retries=0) as (proxy, client):
        proxy.play(Reply((), status=S.UNAVAILABLE))
        assert (await failure(client)).code == "LLM_PROXY_UNAVAILABLE"
        assert proxy.shared == []


async def test_a_shared_call_ended_by_llmproxys_stop_is_replaced_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(llm_module, "RESTART_ATTEMPTS", 1)
    async with scripted_llm(shared=True, turn_retries=0) as (proxy, client):
        assert (await answer(client))[0] == TextPiece("ok")
        proxy.stopping.set()  # its grace period: the idle call ends
        await asyncio.sleep(0.1)
        proxy.stopping.clear()  # serving again (a restarted llmproxy)
        assert (await answer(client))[0] == TextPiece("ok")
        assert proxy.shared_calls == 2 and len(proxy.requests) == 2


async def test_a_shared_call_too_old_for_new_requests_ends_once_its_own_are_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_calls, "MAX_AGE", 0.0)
    async with scripted_llm(shared=True) as (proxy, client):
        assert (await answer(client))[0] == TextPiece("ok")
        assert (await answer(client))[0] == TextPiece("ok")
        await asyncio.sleep(0.1)
        assert proxy.shared_calls == 2  # the second request opened a new call
        assert proxy.shared_ended == 1  # and the first ended, answered, not cut


async def test_each_listed_replica_gets_a_shared_call_of_its_own() -> None:
    async with scripted_replicas(2, shared=2) as (proxies, client):
        for _ in range(4):
            assert (await answer(client))[0] == TextPiece("ok")
        assert [p.shared_calls for p in proxies] == [1, 1]
        assert [len(p.requests) for p in proxies] == [2, 2]


async def test_replicas_behind_one_name_share_the_calls_as_the_shared_call_renews(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_calls, "MAX_AGE", 0.0)  # every request renews the call
    async with scripted_replicas(2, shared=1) as (proxies, client):
        for _ in range(8):
            assert (await answer(client))[0] == TextPiece("ok")
        # One call at a time, yet both replicas answered (one call would have kept one).
        assert sorted(len(p.requests) for p in proxies) == [4, 4]
