"""The two IDE transports over one Stream: WebSocket frames and SSE frames."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from clients.python import MeshClient, SessionStream
from codelab.v1 import common_pb2 as pb
from services.common import tracing
from services.common.errors import ErrorKind
from services.common.socket_writes import SEND_MANY
from services.gateway.errors import TRANSPORT, ProtocolError
from services.gateway.event_json import dumps
from services.gateway.held_streams import StreamReader
from services.gateway.mesh import RETRY_AFTER_MS, close_code, error_event
from services.gateway.seed000 import Seed000Shape
from services.gateway.translate import event_to_json, local_error, parse_text

log = logging.getLogger(__name__)


def rejected(error: ProtocolError) -> pb.ClientMessage:
    """A bad client message, reported through the orchestrator so the error gets a seq."""
    return pb.ClientMessage(
        rejected=pb.Rejected(error_code=pb.ErrorCode.Value(error.code), content=error.message)
    )


async def report_and_close(websocket: WebSocket, payload: dict[str, Any], close: int) -> None:
    """Tell the IDE why, then close the socket with ``close`` (see ``errors.TRANSPORT``)."""
    log.warning("stream failed", extra={"fields": {"code": payload["error_code"]}})
    if websocket.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await websocket.send_text(dumps(payload))
            await websocket.close(close)


async def pump_to_websocket(stream: SessionStream, websocket: WebSocket, session_id: str) -> None:
    """Forward every event of the stream; when the stream ends, tell the IDE and close."""
    many = SEND_MANY in websocket.scope.get("extensions", {})
    try:
        async for batch in stream.batches():
            texts = [dumps(event_to_json(event)) for event in batch]
            if many and len(texts) > 1:
                await websocket.send({"type": "websocket.send", "texts": texts})
                continue
            for text in texts:
                await websocket.send_text(text)
    except grpc.aio.AioRpcError as error:
        if stream.closed:
            return  # this side closed it
        await report_and_close(websocket, error_event(error, session_id), close_code(error))
        return
    except (WebSocketDisconnect, RuntimeError, OSError):
        return  # the IDE went away; the receiving side ends the session
    if stream.closed:
        return
    ended = local_error(
        "SERVICE_UNAVAILABLE",
        "the runtime ended the stream",
        session_id,
        {"retry_after_ms": RETRY_AFTER_MS},
    )
    await report_and_close(websocket, ended, TRANSPORT[ErrorKind.UNAVAILABLE].ws_close)


async def websocket_session(
    client: MeshClient, websocket: WebSocket, session_id: str, *, last_seq: int, user: str
) -> None:
    """Run one IDE connection until either side goes away."""
    try:
        stream = await client.open_stream(session_id, last_seq=last_seq, user_id=user)
    except grpc.aio.AioRpcError as error:
        await report_and_close(websocket, error_event(error, session_id), close_code(error))
        return
    pump = asyncio.create_task(pump_to_websocket(stream, websocket, session_id))
    try:
        while True:
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                return
            text = frame.get("text")
            if text is None and frame.get("bytes") is not None:
                text = frame["bytes"].decode("utf-8", errors="replace")
            try:
                message = parse_text(text or "")
            except ProtocolError as error:
                message = rejected(error)
            try:
                # Each IDE message is a trace of its own, linked to the connection's.
                kind = message.WhichOneof("message") or "empty"
                with tracing.new_trace(f"ide {kind}", {"codelab.session_id": session_id}):
                    await stream.send(message)
            except grpc.aio.AioRpcError:
                await asyncio.shield(pump)  # it reads the same failure, reports it and closes
                return
    finally:
        stream.close()
        pump.cancel()
        await asyncio.wait([pump])


def sse_frame(payload: dict[str, Any], event: str = "message", seq: Any = None) -> str:
    seq = seq or payload.get("seq")
    head = f"id: {seq}\n" if seq else ""
    return f"{head}event: {event}\ndata: {dumps(payload)}\n\n"


def _render(payload: dict[str, Any], event: str, shape: Seed000Shape | None) -> str:
    """One event's frames: as is, or in seed 000's shape."""
    if shape is None:
        return sse_frame(payload, event)
    seq = payload.get("seq")
    return "".join(sse_frame(data, name, seq) for name, data in shape.frames(payload))


async def sse_events(
    reader: StreamReader,
    session_id: str,
    *,
    heartbeat: float,
    idle_timeout: float,
    follow: bool = False,
    shape: Seed000Shape | None = None,
    hold: Callable[[StreamReader], bool] | None = None,
) -> AsyncIterator[str]:
    """SSE frames until the turn's ``done`` (sent as ``event: done``); ``:`` heartbeats.

    ``follow``: a resumable session stream instead — every event (``done`` included) as
    ``event: message`` with ``id: <seq>``, for as long as the client stays. ``shape``:
    seed 000's chunks instead of the events as they are (seed000.py). ``hold``: offered
    the stream once its turn was read to ``done`` (True: kept for the session's next
    request, see held_streams.py); otherwise the stream is closed. Events read together
    (a replayed page, a burst) leave as one chunk: one ASGI send, not one per event.
    """
    queue = reader.queue
    assert queue is not None, "a held stream is taken before it is read"
    reader.start()
    finished = False
    idle = 0.0
    ready: list[str] = []  # a batch's frames, sent as one body chunk when it is read
    try:
        while True:
            try:
                if queue.empty():
                    async with asyncio.timeout(heartbeat):  # no task, as wait_for makes
                        item = await queue.get()
                else:  # a batch's later events: no timer to arm and disarm
                    item = queue.get_nowait()
            except TimeoutError:
                idle += heartbeat
                if idle >= idle_timeout and not follow:
                    timeout = "no event within the stream timeout"
                    yield _render(local_error("LLM_TIMEOUT", timeout, session_id), "message", shape)
                    yield sse_frame({"status": "timeout"}, "done")
                    return
                yield ": heartbeat\n\n"
                continue
            idle = 0.0
            if item is None:
                yield "".join(ready) + sse_frame({"status": "closed"}, "done")
                return
            if isinstance(item, grpc.aio.AioRpcError):
                yield "".join(ready) + _render(error_event(item, session_id), "message", shape)
                yield sse_frame({"status": "error"}, "done")
                return
            payload = event_to_json(item)
            if payload["type"] == "done" and not follow:
                finished = True
                yield "".join(ready) + _render(payload, "done", shape)
                return
            ready.append(_render(payload, "message", shape))
            if queue.empty():  # the batch is read: one chunk, one ASGI send
                yield "".join(ready)
                ready.clear()
    finally:
        if not (finished and hold is not None and hold(reader)):
            await reader.aclose()
