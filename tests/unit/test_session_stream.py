"""A Stream's events as the runtime sent them: one batch per gRPC message (the event and
its ``then``), and what an earlier loop left unread first, so nothing is lost or reordered
between the two ways of reading."""

from __future__ import annotations

from typing import cast

from grpc import aio

from clients.python import SessionStream
from clients.python.client import StreamCall
from codelab.v1 import common_pb2 as pb


def event(seq: int, kind: str = "token") -> pb.ServerEvent:
    if kind == "done":
        return pb.ServerEvent(done=pb.Done(), seq=seq)
    return pb.ServerEvent(assistant_message=pb.AssistantMessage(token=f"t{seq}"), seq=seq)


class Messages:
    """The call's side of a Stream: ``read`` returns the queued messages, then EOF."""

    def __init__(self, *messages: pb.ServerEvent) -> None:
        self._messages = list(messages)

    async def read(self) -> object:
        return self._messages.pop(0) if self._messages else aio.EOF


def with_then(head: pb.ServerEvent, *rest: pb.ServerEvent) -> pb.ServerEvent:
    head.then.extend(rest)
    return head


async def test_each_message_is_one_batch_with_its_then_in_order() -> None:
    call = Messages(with_then(event(1), event(2), event(3)), event(4))
    stream = SessionStream(cast(StreamCall, call))
    got = [[e.seq for e in batch] async for batch in stream.batches()]
    assert got == [[1, 2, 3], [4]]


async def test_events_an_earlier_loop_left_come_first() -> None:
    call = Messages(with_then(event(1), event(2, "done"), event(3), event(4)), event(5))
    stream = SessionStream(cast(StreamCall, call))
    assert [e.seq for e in await stream.until_done()] == [1, 2]
    got = [[e.seq for e in batch] async for batch in stream.batches()]
    assert got == [[3, 4], [5]]
