"""llmproxy's CompleteMany against the scripted model: requests tagged by id on one call,
each answered as Complete answers it, failing and cancelled alone."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import grpc

from codelab.v1 import llmproxy_pb2 as pb
from tests.support.mesh import Mesh, running_mesh


def request(text: str, **kwargs: object) -> pb.CompleteRequest:
    return pb.CompleteRequest(
        session_id="s-many",
        purpose="test",
        messages=[pb.ChatMessage(role="user", content=text)],
        **kwargs,  # type: ignore[arg-type]
    )


def envelope(request_id: int, body: pb.CompleteRequest) -> pb.CompleteEnvelope:
    return pb.CompleteEnvelope(id=request_id, request=body)


async def rest(call: grpc.aio.StreamStreamCall) -> list[pb.TaggedChunk]:
    """The items of every batch until the call ends (read(), not iteration: a test that
    read() once may not iterate the same call)."""
    items: list[pb.TaggedChunk] = []
    while (batch := await call.read()) is not grpc.aio.EOF:
        assert isinstance(batch, pb.CompleteBatch)
        items.extend(batch.items)
    return items


async def test_requests_on_one_call_are_answered_each_under_its_id(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"match": "first", "text": "one two three", "token_delay_ms": 20})
    mesh.scripted.enqueue({"match": "second", "text": "four five", "token_delay_ms": 20})
    call = mesh.client.llmproxy.CompleteMany()
    await call.write(envelope(7, request("first")))
    await call.write(envelope(9, request("second")))
    await call.done_writing()
    texts: dict[int, str] = defaultdict(str)
    ends: list[int] = []
    batches = 0
    async for batch in call:
        batches += 1
        for item in batch.items:
            if item.HasField("chunk"):
                texts[item.id] += item.chunk.text_delta
            else:
                assert item.end
                ends.append(item.id)
    assert dict(texts) == {7: "one two three", 9: "four five"}
    assert sorted(ends) == [7, 9]
    assert await call.code() == grpc.StatusCode.OK
    assert batches > 1  # streamed as the tokens came, not at the end


async def test_a_failing_request_fails_alone_with_its_status_and_code(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"match": "fine", "text": "still here"})
    call = mesh.client.llmproxy.CompleteMany()
    await call.write(pb.CompleteEnvelope(id=1, request=pb.CompleteRequest(session_id="s")))
    await call.write(envelope(2, request("fine")))
    await call.done_writing()
    items = [item async for batch in call for item in batch.items]
    failure = next(item.failure for item in items if item.HasField("failure"))
    assert [item.id for item in items if item.HasField("failure")] == [1]
    assert failure.status == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert failure.error_code == "MISSING_REQUIRED_FIELD"
    assert "messages must not be empty" in failure.message
    assert "".join(i.chunk.text_delta for i in items if i.id == 2) == "still here"
    assert [item.id for item in items if item.end] == [2]


async def test_a_cancelled_request_stops_and_the_call_goes_on(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"match": "slow", "text": "a " * 200, "token_delay_ms": 50})
    mesh.scripted.enqueue({"match": "after", "text": "answered"})
    call = mesh.client.llmproxy.CompleteMany()
    await call.write(envelope(1, request("slow")))
    first = await call.read()
    assert isinstance(first, pb.CompleteBatch) and first.items[0].id == 1
    await call.write(pb.CompleteEnvelope(id=1, cancel=True))
    await call.write(envelope(2, request("after")))
    await call.done_writing()
    items = await rest(call)
    assert not any(item.id == 1 and item.end for item in items)
    assert len([item for item in items if item.id == 1]) < 10  # stopped, not played out
    assert [item.id for item in items if item.end] == [2]
    assert await call.code() == grpc.StatusCode.OK


async def test_a_call_closed_unused_ends_at_once(mesh: Mesh) -> None:
    before = len(mesh.scripted.requests)
    call = mesh.client.llmproxy.CompleteMany()
    await call.done_writing()
    assert [batch async for batch in call] == []
    assert await call.code() == grpc.StatusCode.OK
    assert len(mesh.scripted.requests) == before  # nothing went upstream


async def test_a_reused_id_is_refused_while_its_request_runs(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"match": "long", "text": "b " * 20, "token_delay_ms": 20})
    call = mesh.client.llmproxy.CompleteMany()
    await call.write(envelope(3, request("long")))
    await asyncio.sleep(0.05)
    await call.write(envelope(3, request("long again")))
    await call.done_writing()
    items = [item async for batch in call for item in batch.items]
    refused = [item.failure for item in items if item.HasField("failure")]
    assert len(refused) == 1 and refused[0].error_code == "INVALID_MESSAGE"
    assert "".join(i.chunk.text_delta for i in items if i.HasField("chunk")) == "b " * 20


async def test_past_its_budget_a_streams_text_goes_in_fewer_pieces_first_word_at_once(
    database_url: str,
) -> None:
    # A budget of one piece a second: a lone stream's hold is the longest (MAX_HOLD).
    async with running_mesh(database_url, gateway=False, llm_stream_pieces_per_s=1.0) as mesh:
        words = "one two three four five six seven eight"
        mesh.scripted.enqueue({"match": "paced", "text": words, "token_delay_ms": 20})
        call = mesh.client.llmproxy.CompleteMany()
        await call.write(envelope(1, request("paced")))
        await call.done_writing()
        items = await rest(call)
    pieces = [item.chunk.text_delta for item in items if item.HasField("chunk")]
    assert "".join(pieces) == words
    assert pieces[0] == "one" and len(pieces) < len(words.split())
    assert items[-1].end
