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

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


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


class CoalescedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol over ``CoalescedWrites``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(joined(transport, self.loop))


class CoalescedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP protocol over ``CoalescedWrites``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(joined(transport, self.loop))
