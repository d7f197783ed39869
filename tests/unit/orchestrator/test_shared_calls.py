"""The orchestrator's side of CompleteMany (shared_calls.py) over a hand-driven call: how a
call that breaks, or fails to take a request, reaches the requests on it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from grpc import aio

from codelab.v1 import llmproxy_pb2 as pb
from services.orchestrator.peers import shared_calls
from services.orchestrator.peers.shared_calls import SharedCalls


class HandCall:
    """A CompleteMany call whose reads the test feeds (a batch, an error or EOF)."""

    def __init__(self, write_error: BaseException | None = None) -> None:
        self.reads: asyncio.Queue[Any] = asyncio.Queue()
        self.written: list[pb.CompleteEnvelope] = []
        self.write_error = write_error
        self.cancelled = False
        self.half_closed = False

    async def read(self) -> Any:
        item = await self.reads.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def write(self, envelope: pb.CompleteEnvelope) -> None:
        if self.write_error is not None:
            raise self.write_error
        self.written.append(envelope)

    async def done_writing(self) -> None:
        self.half_closed = True

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Opener:
    """Opens hand-driven calls, keeping them for the test."""

    def __init__(self, write_error: BaseException | None = None) -> None:
        self.calls: list[HandCall] = []
        self.write_error = write_error

    def __call__(self) -> Any:
        self.calls.append(HandCall(self.write_error))
        return self.calls[-1]


def lost(status: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> aio.AioRpcError:
    return aio.AioRpcError(status, aio.Metadata(), aio.Metadata(), "connection lost")


async def chunks(calls: SharedCalls) -> list[pb.CompleteChunk]:
    return [c async for c in calls.request(pb.CompleteRequest(session_id="s"), 5.0)]


async def test_a_broken_call_fails_its_requests_and_the_next_opens_another() -> None:
    opener = Opener()
    calls, opened = SharedCalls(opener), opener.calls
    waiting = asyncio.ensure_future(chunks(calls))
    await asyncio.sleep(0.01)
    opened[0].reads.put_nowait(lost())
    with pytest.raises(aio.AioRpcError) as failed:
        await waiting
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    answer = asyncio.ensure_future(chunks(calls))
    await asyncio.sleep(0.01)
    assert len(opened) == 2
    request_id = opened[1].written[0].id
    done = pb.CompleteBatch(
        items=[
            pb.TaggedChunk(id=request_id, chunk=pb.CompleteChunk(text_delta="ok")),
            pb.TaggedChunk(id=request_id, end=True),
        ]
    )
    opened[1].reads.put_nowait(done)
    assert [c.text_delta for c in await answer] == ["ok"]


@pytest.mark.parametrize(
    ("ending", "status"),
    [
        (aio.EOF, grpc.StatusCode.UNAVAILABLE),  # llmproxy ended it (its grace period)
        (RuntimeError("a bug"), grpc.StatusCode.UNKNOWN),  # not a gRPC error at all
    ],
)
async def test_a_call_that_ends_otherwise_fails_its_requests_too(
    ending: Any, status: grpc.StatusCode
) -> None:
    opener = Opener()
    calls = SharedCalls(opener)
    waiting = asyncio.ensure_future(chunks(calls))
    await asyncio.sleep(0.01)
    opener.calls[0].reads.put_nowait(ending)
    with pytest.raises(aio.AioRpcError) as failed:
        await waiting
    assert failed.value.code() == status


async def test_a_request_the_call_cannot_take_gets_the_calls_error() -> None:
    opener = Opener(write_error=asyncio.InvalidStateError())
    calls = SharedCalls(opener)
    waiting = asyncio.ensure_future(chunks(calls))
    await asyncio.sleep(0.01)
    opener.calls[0].reads.put_nowait(lost(grpc.StatusCode.INTERNAL))  # why the call ended
    with pytest.raises(aio.AioRpcError) as failed:
        await waiting
    assert failed.value.code() == grpc.StatusCode.INTERNAL


async def test_a_request_left_early_is_cancelled_by_its_id() -> None:
    opener = Opener()
    calls = SharedCalls(opener)
    request = calls.request(pb.CompleteRequest(session_id="s"), 5.0)
    stream = aiter(request)
    pending = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.01)
    call = opener.calls[0]
    request_id = call.written[0].id
    call.reads.put_nowait(
        pb.CompleteBatch(items=[pb.TaggedChunk(id=request_id, chunk=pb.CompleteChunk())])
    )
    await pending
    request.cancel()
    await asyncio.sleep(0.01)
    assert call.written[-1] == pb.CompleteEnvelope(id=request_id, cancel=True)
    calls.close()
    assert call.cancelled


def ended(request_id: int) -> pb.CompleteBatch:
    return pb.CompleteBatch(items=[pb.TaggedChunk(id=request_id, end=True)])


async def test_an_old_call_takes_no_more_requests_and_ends_after_its_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_calls, "MAX_AGE", 0.0)
    opener = Opener()
    calls = SharedCalls(opener)
    first = asyncio.ensure_future(chunks(calls))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(chunks(calls))  # the first call is too old: a new one
    await asyncio.sleep(0.01)
    old, new = opener.calls
    assert len(old.written) == 1 and len(new.written) == 1
    assert not old.half_closed  # its request still runs
    old.reads.put_nowait(ended(old.written[0].id))
    assert await first == []
    await asyncio.sleep(0.01)
    assert old.half_closed and not old.cancelled  # ended, not cut
    new.reads.put_nowait(ended(new.written[0].id))
    assert await second == []
    await asyncio.sleep(0.01)
    assert not new.half_closed  # the current call stays open for the next request
