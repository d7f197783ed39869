"""A session's Stream kept between its SSE and ``/v1`` requests.

An SSE request opens a Stream, attaches, sends its message and reads its turn to ``done``;
the IDE sends the session's next message the same way moments later. A new Stream's set-up
and attach are a round trip and a statement on that message's way (~1.5 ms of its first
token, half of what SSE costs over a held WebSocket), so a request that read its turn to
``done`` leaves its stream attached, held for the same session and user; the next request
takes it (a ``/v1`` request that continues a session too: the attach that made the held
stream checked that the session is the user's). While held, what arrives is read and
dropped: a request hears what follows it, as on a new stream. A held stream that ends is
forgotten; one not taken within ``seconds``, pushed out by ``most`` newer ones, or of a
session deleted through this gateway, is closed.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeAlias

import grpc
from prometheus_client import Counter

from clients.python import SessionStream
from codelab.v1 import common_pb2 as pb

Item: TypeAlias = pb.ServerEvent | grpc.aio.AioRpcError | None
"""What a reader hands on: an event, the failure that ended the stream, or None (it ended)."""

REUSED = Counter(
    "codelab_gateway_sse_streams_reused_total",
    "SSE and /v1 requests that took a session's held stream",
)
HOLD_SECONDS = 30.0
MOST_HELD = 256


class StreamReader:
    """A Stream and the task reading it into ``queue`` (from ``start``, by the response
    that reads it: a response never sent leaves nothing running); while held (``queue``
    None) what arrives is dropped. ``events`` reads a stream nobody reads yet directly."""

    def __init__(self, stream: SessionStream) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[Item] | None = asyncio.Queue()
        self.ended = False
        self.on_end: Callable[[], None] | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start reading (once)."""
        if self.task is None:
            self.task = asyncio.create_task(self._pump(), name="sse-stream-reader")

    async def _pump(self) -> None:
        last: Item = None
        try:
            async for event in self.stream:
                if self.queue is not None:
                    self.queue.put_nowait(event)
        except grpc.aio.AioRpcError as error:
            last = error
        finally:  # a cancelled call or task ends it too
            self.ended = True
            if self.queue is not None:
                self.queue.put_nowait(last)
            if self.on_end is not None:
                self.on_end()

    async def events(self) -> AsyncGenerator[pb.ServerEvent, None]:
        """The stream's events, raising the failure that ends it: read from the stream
        itself while no task reads it (a new stream: no queue between it and the
        response), else from ``queue``. ``start`` it before it is held."""
        if self.task is None:
            async for event in self.stream:
                yield event
            return
        queue = self.queue
        assert queue is not None, "a held stream is taken before it is read"
        while True:
            item = queue.get_nowait() if not queue.empty() else await queue.get()
            if item is None:
                return
            if isinstance(item, grpc.aio.AioRpcError):
                raise item
            yield item

    def close(self) -> None:
        """End the stream and its reading (the task finishes on its own)."""
        self.stream.close()
        if self.task is not None:
            self.task.cancel()

    async def aclose(self) -> None:
        """``close``, and wait for the reading to stop."""
        self.close()
        if self.task is not None:
            await asyncio.wait([self.task])


class StreamHold:
    """Streams of finished SSE turns, by (session, user), for the session's next request."""

    def __init__(self, seconds: float = HOLD_SECONDS, most: int = MOST_HELD) -> None:
        self.seconds = seconds
        self.most = most
        self._held: OrderedDict[tuple[str, str], tuple[StreamReader, asyncio.TimerHandle]] = (
            OrderedDict()
        )
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, session_id: str, user: str) -> bool:
        """A stream of the session is held for ``user`` and has not ended."""
        entry = self._held.get((session_id, user))
        return entry is not None and not entry[0].ended

    def forget_session(self, session_id: str) -> None:
        """Close the session's held streams (it was deleted)."""
        for key in [key for key in self._held if key[0] == session_id]:
            self._drop(*self._held.pop(key))

    def take(self, session_id: str, user: str) -> StreamReader | None:
        """The session's held stream for ``user``, reading for the caller now; None when
        there is none (or it ended meanwhile)."""
        entry = self._held.pop((session_id, user), None)
        if entry is None:
            return None
        reader, timer = entry
        if reader.ended:
            self._drop(reader, timer)
            return None
        timer.cancel()
        reader.on_end = None
        reader.queue = asyncio.Queue()
        REUSED.inc()
        return reader

    def give_back(self, session_id: str, user: str, reader: StreamReader) -> bool:
        """Hold ``reader`` for the session's next request; False when it is not kept (it
        ended, one is held already, or the gateway is stopping): the caller closes it."""
        key = (session_id, user)
        if reader.ended or key in self._held or self._closed:
            return False
        reader.queue = None
        timer = asyncio.get_running_loop().call_later(self.seconds, self._forget, key, reader)
        self._held[key] = (reader, timer)
        reader.on_end = lambda: self._forget(key, reader)
        while len(self._held) > self.most:
            self._drop(*self._held.popitem(last=False)[1])
        return True

    def _forget(self, key: tuple[str, str], reader: StreamReader) -> None:
        entry = self._held.get(key)
        if entry is not None and entry[0] is reader:
            del self._held[key]
            self._drop(*entry)

    def _drop(self, reader: StreamReader, timer: asyncio.TimerHandle) -> None:
        """Close a stream no longer held (its timer no longer due)."""
        timer.cancel()
        reader.on_end = None
        closing = asyncio.create_task(reader.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def send(
        self,
        session_id: str,
        user: str,
        message: pb.ClientMessage,
        opened: Callable[[pb.ClientMessage], Awaitable[SessionStream]],
    ) -> StreamReader:
        """``message`` sent on the session's held stream or, when there is none or it
        ended before the message went (then it was not sent), with the attach of a new
        one (``opened(message)``)."""
        reader = self.take(session_id, user)
        if reader is not None:
            try:
                await reader.stream.send(message)
                return reader
            except grpc.aio.AioRpcError:
                await reader.aclose()
        return StreamReader(await opened(message))

    async def close(self) -> None:
        """Close every held stream (the gateway is stopping)."""
        self._closed = True
        while self._held:
            self._drop(*self._held.popitem()[1])
        if self._closing:
            await asyncio.wait(self._closing)
