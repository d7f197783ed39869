"""What a connection sends in one loop turn leaves in one socket write: a WebSocket's frames
are still each its own message, in order, with the close after them; an HTTP response's
chunks arrive whole, and the connection serves the next request. A batch sent with
``SEND_MANY`` is one message per text, with or without compression."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from services.common.asgi import running_asgi
from services.common.socket_writes import SEND_MANY, CoalescedWrites, joined


class Recorded:
    """A transport that records its writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return f"info:{name}"


async def test_writes_of_one_turn_are_one_write_and_a_close_writes_them_first() -> None:
    recorded = Recorded()
    writes = CoalescedWrites(recorded, asyncio.get_running_loop())  # type: ignore[arg-type]
    writes.write(b"a")
    writes.write(bytearray(b"b"))
    assert recorded.writes == []  # not before the loop's next turn
    await asyncio.sleep(0)
    assert recorded.writes == [b"ab"]
    writes.write(b"c")
    writes.write(b"d")
    writes.close()
    assert recorded.writes == [b"ab", b"cd"] and recorded.closed
    await asyncio.sleep(0)  # the flush scheduled for "c" finds nothing left
    assert recorded.writes == [b"ab", b"cd"]
    assert writes.get_extra_info("peername") == "info:peername"
    # A WebSocket upgraded from HTTP gets the HTTP side's joined transport, not a second one.
    assert joined(writes, asyncio.get_running_loop()) is cast(Any, writes)  # type: ignore[arg-type]


async def test_nothing_is_written_after_an_abort_or_once_the_transport_closes() -> None:
    recorded = Recorded()
    writes = CoalescedWrites(recorded, asyncio.get_running_loop())  # type: ignore[arg-type]
    writes.write(b"lost")
    writes.abort()
    await asyncio.sleep(0)
    assert recorded.writes == [] and recorded.aborted
    closing = Recorded()
    writes = CoalescedWrites(closing, asyncio.get_running_loop())  # type: ignore[arg-type]
    writes.write(b"late")
    closing.closed = True  # the peer went away meanwhile
    await asyncio.sleep(0)
    assert closing.writes == []


async def burst(websocket: WebSocket) -> None:
    await websocket.accept()
    count = int(await websocket.receive_text())
    for n in range(count):  # all in one turn of the loop
        await websocket.send_text(f"frame {n}")
    await websocket.close(code=4001, reason="done")


async def chunks(request: Request) -> StreamingResponse:
    count = int(request.query_params["count"])

    async def body() -> AsyncIterator[str]:
        for n in range(count):
            yield f"data: {n}\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


async def test_a_streamed_response_arrives_whole_and_the_connection_serves_again() -> None:
    app = Starlette(routes=[Route("/chunks", chunks), WebSocketRoute("/burst", burst)])
    async with running_asgi(app) as port, httpx.AsyncClient() as http:
        url = f"http://127.0.0.1:{port}/chunks"
        for count in (500, 3):  # the second on the same kept-alive connection
            async with http.stream("GET", url, params={"count": count}) as response:
                lines = [line async for line in response.aiter_lines() if line]
            assert lines == [f"data: {n}" for n in range(count)]
        async with websockets.connect(f"ws://127.0.0.1:{port}/burst") as ws:
            await ws.send("2")
            assert [await ws.recv(), await ws.recv()] == ["frame 0", "frame 1"]


async def test_a_burst_of_frames_arrives_whole_in_order_then_the_close() -> None:
    app = Starlette(routes=[WebSocketRoute("/burst", burst)])
    async with (
        running_asgi(app) as port,
        websockets.connect(f"ws://127.0.0.1:{port}/burst") as ws,
    ):
        await ws.send("500")
        got: list[str | bytes] = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                got.append(await ws.recv())
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "done")
    assert got == [f"frame {n}" for n in range(500)]


async def many(websocket: WebSocket) -> None:
    """Sends a batch with SEND_MANY, then one frame the usual way, then closes; what the
    batch send raised once the client had gone is kept in ``websocket.app.state``."""
    await websocket.accept()
    assert SEND_MANY in websocket.scope["extensions"]
    count = int(await websocket.receive_text())
    await websocket.send({"type": "websocket.send", "texts": [f"m {n}" for n in range(count)]})
    await websocket.send_text("single")
    if count == 0:  # the client closes now; a batch to a closed socket is an error
        await websocket.receive()
        try:
            await websocket.send({"type": "websocket.send", "texts": ["late"]})
        except WebSocketDisconnect as error:
            websocket.app.state.late = error
        return
    await websocket.close(code=4002, reason="sent")


@pytest.mark.parametrize("compression", ["deflate", None])
async def test_a_batch_sent_at_once_is_one_message_per_text_in_order(
    compression: str | None,
) -> None:
    app = Starlette(routes=[WebSocketRoute("/many", many)])
    async with (
        running_asgi(app) as port,
        websockets.connect(f"ws://127.0.0.1:{port}/many", compression=compression) as ws,
    ):
        await ws.send("300")
        got: list[str | bytes] = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                got.append(await ws.recv())
    assert got == [f"m {n}" for n in range(300)] + ["single"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4002


async def test_a_batch_for_a_client_that_left_is_a_disconnect_not_a_crash() -> None:
    app = Starlette(routes=[WebSocketRoute("/many", many)])
    async with running_asgi(app) as port:
        async with websockets.connect(f"ws://127.0.0.1:{port}/many") as ws:
            await ws.send("0")
            assert await ws.recv() == "single"
        for _ in range(200):
            if hasattr(app.state, "late"):
                break
            await asyncio.sleep(0.01)
    assert isinstance(app.state.late, WebSocketDisconnect)


async def test_a_batch_before_accept_is_refused() -> None:
    refused: list[BaseException] = []

    async def early(websocket: WebSocket) -> None:
        try:
            await websocket._send({"type": "websocket.send", "texts": ["too soon"]})
        except RuntimeError as error:
            refused.append(error)
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute("/early", early)])
    async with running_asgi(app) as port:
        with pytest.raises(websockets.InvalidStatus):
            async with websockets.connect(f"ws://127.0.0.1:{port}/early"):
                pass
    assert refused and "before accept" in str(refused[0])
