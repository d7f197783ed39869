"""Many Completes on one call (``CompleteMany``): the server's side.

Opening a gRPC call costs both processes more than a message on an open one (measured on
the 2-core box: ~0.45 ms of CPU for a call with one message each way against ~0.15 ms for
one more round trip on an open call), and each chunk of each call is its own message. A
client that makes many model calls (the orchestrator) keeps one CompleteMany call open per
llmproxy instead: each request runs as ``Complete`` runs it, in a task of its own, and the
chunks of all of them that are ready while a batch is being written go out together in
the next one (adjacent text of one request joined, as ``coalesce.py`` joins it). A request
ends with its own ``end`` or ``failure`` (the status, code and details its Complete call
would have ended with); the call goes on. A request the client cancels by its id is
cancelled as a Complete call the client left. The call ends once the client stops writing
and every request has ended; a call that ends otherwise cancels what still runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from codelab.v1 import llmproxy_pb2 as pb
from services.common.errors import ServiceError
from services.common.interceptors import ERROR_CODE_KEY, ERROR_DETAILS_KEY, ending_of
from services.llmproxy.pacing import HeldText, TextBudget, joined

log = logging.getLogger(__name__)

Complete = Callable[[pb.CompleteRequest, Any], AsyncIterator[pb.CompleteChunk]]
"""A Complete handler: ``(request, context)`` -> its chunks."""


class Aborted(Exception):
    """A request's handler aborted it (``RequestContext.abort``)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]]
    ) -> None:
        super().__init__(details)
        self.code, self.details, self.trailing = code, details, tuple(trailing)


class RequestContext:
    """What a Complete handler may do with its context inside CompleteMany: abort its own
    request, which ends that request only, with the status it names."""

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        raise Aborted(code, details, trailing_metadata)


def failure_of(error: Exception) -> pb.CallFailure:
    """How a request failed, as its own Complete call would have ended (``ending_of``, the
    services' interceptor's; an abort as its handler named it)."""
    if isinstance(error, Aborted):
        status, details, trailing = error.code, error.details, error.trailing
    else:
        if not isinstance(error, ServiceError):
            log.error("unhandled error in a shared Complete", exc_info=error)
        status, details, trailing = ending_of(error)
    fields = dict(trailing)
    return pb.CallFailure(
        status=status.value[0],
        message=details,
        error_code=fields.get(ERROR_CODE_KEY, ""),
        details_json=fields.get(ERROR_DETAILS_KEY, ""),
    )


class _Outbox:
    """Items ready for the next batch; adjacent deltas of one request joined."""

    def __init__(self) -> None:
        self.items: list[pb.TaggedChunk] = []
        self.ready = asyncio.Event()

    def put(self, item: pb.TaggedChunk) -> None:
        if self.items and joined(self.items[-1], item):
            return
        self.items.append(item)
        self.ready.set()

    def take(self) -> list[pb.TaggedChunk]:
        items, self.items = self.items, []
        self.ready.clear()
        return items


async def serve_many(
    envelopes: AsyncIterable[pb.CompleteEnvelope],
    complete: Complete,
    stopping: asyncio.Event | None = None,
    budget: TextBudget | None = None,
) -> AsyncIterator[pb.CompleteBatch]:
    """The batches of a CompleteMany call whose client writes ``envelopes``. Once
    ``stopping`` is set (the server's grace period), the call ends as soon as no request
    runs: its client opens another (on a replica that serves) for its next one. ``budget``:
    the text pieces per second the process's streams share (pacing.py; none: no limit)."""
    outbox = _Outbox()
    running: dict[int, asyncio.Task[None]] = {}
    budget = budget or TextBudget(0)

    async def run(request_id: int, request: pb.CompleteRequest) -> None:
        held = HeldText(outbox.put, budget)
        budget.running += 1
        try:
            async for chunk in complete(request, RequestContext()):
                held.put(pb.TaggedChunk(id=request_id, chunk=chunk))
        except asyncio.CancelledError:
            held.drop()
            raise  # cancelled by its client (or the call ended): nobody to tell
        except Exception as error:
            held.put(pb.TaggedChunk(id=request_id, failure=failure_of(error)))  # after its text
        else:
            held.put(pb.TaggedChunk(id=request_id, end=True))
        finally:
            budget.running -= 1
            if running.get(request_id) is asyncio.current_task():
                del running[request_id]
            outbox.ready.set()

    async def read() -> None:
        try:
            async for envelope in envelopes:
                task = running.get(envelope.id)
                if envelope.WhichOneof("body") == "cancel":
                    if task is not None:
                        task.cancel()
                elif task is not None:
                    failure = pb.CallFailure(
                        status=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                        message=f"request id {envelope.id} is still running",
                        error_code="INVALID_MESSAGE",
                    )
                    outbox.put(pb.TaggedChunk(id=envelope.id, failure=failure))
                else:
                    started = asyncio.create_task(run(envelope.id, envelope.request))
                    running[envelope.id] = started
        finally:
            outbox.ready.set()

    reader = asyncio.create_task(read(), name="complete-many-reader")
    stopped = asyncio.create_task((stopping or asyncio.Event()).wait())
    stopped.add_done_callback(lambda _: outbox.ready.set())
    try:
        while True:
            await outbox.ready.wait()
            items = outbox.take()
            if items:
                yield pb.CompleteBatch(items=items)
            if reader.done() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]  # the call ends with it
            if (reader.done() or stopped.done()) and not running and not outbox.items:
                return
    finally:
        for task in (reader, stopped, *running.values()):
            task.cancel()
        await asyncio.gather(reader, stopped, *running.values(), return_exceptions=True)
