"""Server-sent events from raw byte blocks, as cheaply as Python allows.

The upstream's body arrives in blocks of whatever size the network delivered; each
block may hold many events or part of one. ``SseParser.feed`` returns the ``data``
payloads completed by a block, so the caller can treat everything that arrived
together as one unit (one coalesced message downstream instead of one per chunk).
Per the SSE format: lines end in LF, CRLF or CR; an event ends at a blank line; its
``data:`` lines join with LF; comments (``:``) and other fields are ignored.
"""

from __future__ import annotations


class SseParser:
    """Incremental SSE framing: bytes in, complete ``data`` payloads out."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, block: bytes) -> list[bytes]:
        """The data payloads of every event this block completes."""
        buffer = self._buffer + block if self._buffer else block
        if b"\r" in buffer:
            # CR and CRLF line ends are rare (the SDKs' servers send LF): normalise them,
            # keeping a trailing CR that may be the first half of a CRLF.
            tail = buffer.endswith(b"\r")
            buffer = buffer[:-1] if tail else buffer
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            buffer += b"\r" if tail else b""
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = []
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
        self._data = data
        return out

    def close(self) -> list[bytes]:
        """A body that ended without its last blank line still completes that event."""
        pending = self.feed(b"\n\n") if (self._buffer or self._data) else []
        self._buffer, self._data = b"", []
        return pending
