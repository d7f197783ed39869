"""CompleteMany's server loop (services/llmproxy/many.py) over a scripted Complete: batches
of what is ready together, failures per request, and when the call ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from codelab.v1 import llmproxy_pb2 as pb
from services.common.errors import InvalidInput
from services.llmproxy.many import serve_many
from tests.support.many_client import Client


def envelope(request_id: int, text: str) -> pb.CompleteEnvelope:
    body = pb.CompleteRequest(messages=[pb.ChatMessage(role="user", content=text)])
    return pb.CompleteEnvelope(id=request_id, request=body)


async def complete(request: pb.CompleteRequest, context: Any) -> AsyncIterator[pb.CompleteChunk]:
    """Says the request's text back word by word; "bad" fails, "abort" aborts it, "wait"
    waits for the test."""
    text = request.messages[0].content
    if text == "bad":
        raise InvalidInput("a bad request")
    if text == "abort":
        await context.abort(grpc.StatusCode.UNAVAILABLE, "upstream gone")
    if text == "wait":
        try:
            await RELEASE.wait()
        except asyncio.CancelledError:
            CANCELLED.append(request.messages[0].content)
            raise
    for word in text.split():
        yield pb.CompleteChunk(text_delta=word + " ")


RELEASE = asyncio.Event()
CANCELLED: list[str] = []


async def batches(stream: AsyncIterator[pb.CompleteBatch]) -> list[list[pb.TaggedChunk]]:
    return [list(batch.items) async for batch in stream]


async def test_ready_text_of_one_request_travels_joined_and_each_request_ends() -> None:
    client = Client()
    client.send(envelope(1, "a b c"), envelope(2, "d"))
    client.close()
    items = [item for batch in await batches(serve_many(client, complete)) for item in batch]
    text = {i: "".join(x.chunk.text_delta for x in items if x.id == i) for i in (1, 2)}
    assert text == {1: "a b c ", 2: "d "}
    assert len([x for x in items if x.id == 1 and x.HasField("chunk")]) == 1  # joined
    assert sorted(x.id for x in items if x.end) == [1, 2]


async def test_a_failure_and_an_abort_end_their_request_alone() -> None:
    client = Client()
    client.send(envelope(1, "bad"), envelope(2, "abort"), envelope(3, "fine"))
    client.close()
    items = [item for batch in await batches(serve_many(client, complete)) for item in batch]
    failures = {x.id: x.failure for x in items if x.HasField("failure")}
    assert failures[1].status == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert failures[1].error_code == "MISSING_REQUIRED_FIELD"
    assert failures[1].message == "a bad request"
    assert failures[2].status == grpc.StatusCode.UNAVAILABLE.value[0]
    assert (failures[2].error_code, failures[2].message) == ("", "upstream gone")
    assert [x.id for x in items if x.end] == [3]


async def test_stopping_ends_an_idle_call_once_its_requests_are_done() -> None:
    RELEASE.clear()
    client, stopping = Client(), asyncio.Event()
    client.send(envelope(1, "wait"))
    stream = serve_many(client, complete, stopping)
    ended = asyncio.ensure_future(batches(stream))
    await asyncio.sleep(0.05)
    stopping.set()
    await asyncio.sleep(0.05)
    assert not ended.done()  # a request still runs
    RELEASE.set()
    items = [item for batch in await asyncio.wait_for(ended, 2) for item in batch]
    assert [x.id for x in items if x.end] == [1]  # answered, then the call ended


async def test_a_call_that_ends_cancels_what_runs() -> None:
    RELEASE.clear()
    CANCELLED.clear()
    client = Client()
    client.send(envelope(1, "wait"))
    stream = serve_many(client, complete)
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    pending.cancel()  # the client went away
    await asyncio.gather(pending, return_exceptions=True)
    await stream.aclose()  # type: ignore[attr-defined]
    assert CANCELLED == ["wait"]


async def test_a_failed_read_ends_the_call_with_its_error() -> None:
    RELEASE.clear()

    async def broken() -> AsyncIterator[pb.CompleteEnvelope]:
        yield envelope(1, "wait")
        raise ConnectionError("the client's stream broke")

    with pytest.raises(ConnectionError):
        await batches(serve_many(broken(), complete))
