"""What a connection sends in one turn of the event loop leaves in one socket write.

uvicorn's protocols write each ASGI ``websocket.send`` (and each ``http.response.body``, an
SSE stream's every event) to their transport at once, and uvloop makes each such write a
``send`` system call. A replay of 11,000 events is 11,000 frames: py-spy put ~130 ms of the
gateway's ~135 ms of CPU per replay in those writes, and the gateway was the replay's
bottleneck. Here the writes of one loop turn are
joined and written when the turn's ready callbacks have run (``call_soon``): a batch of
events the orchestrator sent together becomes one write, and a lone frame waits only for
the callbacks already ready. Order is kept (every write goes through the buffer) and a close
writes what is buffered first. The HTTP protocol joins its writes the same way (SSE replays
and streams); a WebSocket upgraded from it keeps the HTTP side's joined transport.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.http11 import Request


class CoalescedWrites:
    """A transport whose writes are gathered until the loop's next turn (see above)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Write what is gathered (nothing once the transport closes)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def joined(transport: asyncio.BaseTransport, loop: asyncio.AbstractEventLoop) -> asyncio.Transport:
    """``transport`` with its writes joined (once: an upgrade hands the joined one on)."""
    if isinstance(transport, CoalescedWrites):
        return cast(asyncio.Transport, transport)
    return cast(asyncio.Transport, CoalescedWrites(cast(asyncio.Transport, transport), loop))


SEND_MANY = "codelab.websocket.send_many"
"""ASGI extension: a ``websocket.send`` whose ``texts`` is a list sends one text frame per
item, in order. A replay is thousands of frames, and the ASGI path of one ``send`` (the
framework's state checks, its exception wrapper, the server's dispatch, an await) cost
more than the frame itself; a batch the orchestrator sent together pays it once."""


class CoalescedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol over ``CoalescedWrites``, with ``SEND_MANY``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(joined(transport, self.loop))

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.handshake_complete:  # refused during the handshake: no scope to extend
            return
        self.scope.setdefault("extensions", {})[SEND_MANY] = {}

    async def send(self, message: ASGISendEvent) -> None:
        texts = cast(list[str] | None, message.get("texts"))
        if texts is None or message["type"] != "websocket.send":
            return await super().send(message)
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected()
        if not self.handshake_complete or self.close_sent or self.initial_response is not None:
            raise RuntimeError("websocket.send with texts before accept or after close")
        try:
            for text in texts:
                self.conn.send_text(text.encode())
        except InvalidState:
            raise ClientDisconnected() from None
        finally:
            self.transport.write(b"".join(self.conn.data_to_send()))


class CoalescedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP protocol over ``CoalescedWrites``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(joined(transport, self.loop))
