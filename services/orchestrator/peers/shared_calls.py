"""Model calls over CompleteMany calls kept open to llmproxy: the client's side.

One call per llmproxy address (the channel balances calls, so each lands on its own
replica when there are several), opened at the first request and again after one ends or
has taken requests for ``MAX_AGE`` (replicas behind one DNS name share the calls over time).
A request gets an id, its envelope is written on the next call in turn, and a reader per
call hands each batch's items to their requests. To its caller a request behaves as a
Complete call: its chunks in order, and a failure raised as the ``AioRpcError`` that call
would have ended with (status, ``x-error-code``, ``x-error-details``), so retries and error
codes work as they do for calls of their own. A call that ends fails every request on it
with its error; leaving a request early cancels it on llmproxy. The deadline is each
request's own, counted here (the call itself has none).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeAlias

import grpc
from grpc import aio

from codelab.v1 import llmproxy_pb2 as pb
from services.common.interceptors import ERROR_CODE_KEY, ERROR_DETAILS_KEY

log = logging.getLogger(__name__)

ManyCall: TypeAlias = aio.StreamStreamCall[pb.CompleteEnvelope, pb.CompleteBatch]
_STATUS = {status.value[0]: status for status in grpc.StatusCode}
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
MAX_AGE = 60.0
"""Seconds a shared call takes new requests. Then the next request opens another, which
the channel's round robin may put on another replica (behind one DNS name, pods that came
later get their share), and the old call ends once its requests have."""


def _error(status: grpc.StatusCode, message: str, *trailing: tuple[str, str]) -> aio.AioRpcError:
    return aio.AioRpcError(status, aio.Metadata(), aio.Metadata(*trailing), message)


def failure_error(failure: pb.CallFailure) -> aio.AioRpcError:
    """A request's failure as the error its own Complete call would have raised."""
    trailing = [(ERROR_CODE_KEY, failure.error_code)] if failure.error_code else []
    if failure.details_json:
        trailing.append((ERROR_DETAILS_KEY, failure.details_json))
    status = _STATUS.get(failure.status, grpc.StatusCode.UNKNOWN)
    return _error(status, failure.message, *trailing)


class _Expired:
    """Queued by a request's deadline: the request is out of time (and still open)."""


EXPIRED = _Expired()
Item: TypeAlias = pb.TaggedChunk | aio.AioRpcError | _Expired


class _Call:
    """One open CompleteMany call and the requests waiting on it."""

    def __init__(self, call: ManyCall) -> None:
        self.call = call
        self.waiting: dict[int, asyncio.Queue[Item]] = {}
        self.failed: aio.AioRpcError | None = None
        self.opened = time.monotonic()
        self.retired = False
        """Replaced by a newer call: ended (half-closed) once its last request leaves."""
        self._ending: asyncio.Future[None] | None = None
        self._writing = asyncio.Lock()
        self.reader = asyncio.create_task(self._read(), name="complete-many")

    def retire(self) -> None:
        """Take no more requests; end once those on it have left."""
        self.retired = True
        self.release()

    def release(self) -> None:
        """A request left: a retired call with none left ends (llmproxy ends it with OK)."""
        if self.retired and not self.waiting and self._ending is None and self.failed is None:
            self._ending = asyncio.ensure_future(self._end())
            self._ending.add_done_callback(_quietly)

    async def _end(self) -> None:
        async with self._writing:
            await self.call.done_writing()

    async def _read(self) -> None:
        try:
            while True:
                batch = await self.call.read()
                if batch is aio.EOF:
                    raise _error(grpc.StatusCode.UNAVAILABLE, "llmproxy ended the shared call")
                assert isinstance(batch, pb.CompleteBatch)
                for item in batch.items:
                    queue = self.waiting.get(item.id)
                    if queue is not None:  # else: a request that was left
                        queue.put_nowait(item)
        except aio.AioRpcError as error:
            self.failed = error
        except Exception as error:  # told to every request waiting on the call
            self.failed = _error(grpc.StatusCode.UNKNOWN, f"the shared call failed: {error}")
        except asyncio.CancelledError:
            self.failed = _error(grpc.StatusCode.CANCELLED, "the shared call was closed")
            raise
        finally:
            failed = self.failed or _error(grpc.StatusCode.UNKNOWN, "the shared call failed")
            self.failed = failed
            for queue in self.waiting.values():
                queue.put_nowait(failed)

    async def write(self, envelope: pb.CompleteEnvelope) -> None:
        """Write ``envelope``; an ended call raises its error (grpc's own says nothing)."""
        async with self._writing:
            try:
                await self.call.write(envelope)
            except (asyncio.InvalidStateError, aio.UsageError, aio.AioRpcError):
                if not self.reader.done():
                    await asyncio.wait([self.reader])
                assert self.failed is not None
                raise self.failed from None

    def close(self) -> None:
        self.call.cancel()
        self.reader.cancel()


class SharedRequest:
    """One request on a shared call; iterate it as a Complete call, ``cancel`` to leave."""

    def __init__(
        self, owner: _Call, request_id: int, request: pb.CompleteRequest, timeout: float
    ) -> None:
        self._owner, self._id, self._request, self._timeout = owner, request_id, request, timeout
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._ended = False
        self._sent = False
        self._expiry: asyncio.TimerHandle | None = None

    async def send(self) -> None:
        """Send the request (once); reading it sends it too. Sent ahead of its reading, what
        is answered meanwhile waits in its queue."""
        if self._sent:
            return
        owner, queue = self._owner, self._queue
        if owner.failed is not None:
            raise owner.failed
        self._sent = True
        owner.waiting[self._id] = queue
        # One timer for the whole request (not one per chunk): what came before the
        # deadline is read first, then the request is out of time.
        self._expiry = asyncio.get_running_loop().call_later(
            self._timeout, queue.put_nowait, EXPIRED
        )
        await owner.write(pb.CompleteEnvelope(id=self._id, request=self._request))

    async def __aiter__(self) -> AsyncIterator[pb.CompleteChunk]:
        owner, queue = self._owner, self._queue
        if owner.failed is not None and not self._sent:
            raise owner.failed
        try:
            await self.send()
            while True:
                item = queue.get_nowait() if not queue.empty() else await queue.get()
                if isinstance(item, _Expired):
                    raise _error(DEADLINE, "Deadline Exceeded")
                if isinstance(item, aio.AioRpcError):
                    self._ended = True
                    raise item
                body = item.WhichOneof("body")
                if body == "chunk":
                    yield item.chunk
                    continue
                self._ended = True
                if body == "failure":
                    raise failure_error(item.failure)
                return
        finally:
            if self._expiry is not None:
                self._expiry.cancel()
            owner.waiting.pop(self._id, None)
            owner.release()

    def cancel(self) -> None:
        """Leave the request: llmproxy cancels it unless it ended."""
        owner = self._owner
        if self._expiry is not None:
            self._expiry.cancel()
        owner.waiting.pop(self._id, None)
        if not self._ended and owner.failed is None:
            self._ended = True
            cancel = owner.write(pb.CompleteEnvelope(id=self._id, cancel=True))
            task = asyncio.ensure_future(cancel)
            task.add_done_callback(_quietly)
        owner.release()  # after the cancel: the lock writes in order


def _quietly(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("not written to a shared call: %s", task.exception())


class SharedCalls:
    """``calls`` CompleteMany calls, opened with ``open_call``, taken in turn."""

    def __init__(self, open_call: Callable[[], ManyCall], calls: int = 1) -> None:
        self._open = open_call
        self._calls: list[_Call | None] = [None] * max(1, calls)
        self._turn = itertools.cycle(range(len(self._calls)))
        self._ids = itertools.count(1)
        self._closed = False

    def request(self, request: pb.CompleteRequest, timeout: float) -> SharedRequest:
        """``request`` on the next call (opened now when it is not open)."""
        if self._closed:
            raise RuntimeError("the shared calls are closed")
        slot = next(self._turn)
        call = self._calls[slot]
        if call is not None and call.failed is None and time.monotonic() - call.opened > MAX_AGE:
            call.retire()  # its successor may land on another replica
            call = None
        if call is None or call.failed is not None:
            call = self._calls[slot] = _Call(self._open())
        return SharedRequest(call, next(self._ids), request, timeout)

    def close(self) -> None:
        """End every call (their requests fail CANCELLED); open no more."""
        self._closed = True
        for call in self._calls:
            if call is not None:
                call.close()
