"""Text that arrives while the previous message is still being written goes as one.

The upstream is read by a task of its own; the caller pulls whatever gathered since its
last pull, with consecutive text deltas joined. A slow reader (a busy orchestrator, a
full gRPC window) gets fewer, larger messages instead of a backlog of one per token; a
fast one gets every delta as it came, so the first token never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from services.common.model_stream import ModelOutput, ReasoningPiece, TextPiece


async def coalesced(source: AsyncIterator[ModelOutput]) -> AsyncIterator[ModelOutput]:
    """``source``'s chunks in order, adjacent text (or reasoning) deltas that waited
    joined together;
    ``source``'s failure is raised after what it produced before it."""
    pending: deque[ModelOutput] = deque()
    ready = asyncio.Event()
    finished = False

    async def read() -> None:
        nonlocal finished
        try:
            async for chunk in source:
                pending.append(chunk)
                ready.set()
        finally:
            finished = True
            ready.set()

    reader = asyncio.create_task(read(), name="upstream-reader")
    try:
        while True:
            await ready.wait()
            ready.clear()
            while pending:
                chunk = pending.popleft()
                if isinstance(chunk, TextPiece | ReasoningPiece):
                    kind = type(chunk)
                    parts = [chunk.text]
                    while pending and type(following := pending[0]) is kind:
                        parts.append(following.text)
                        pending.popleft()
                    if len(parts) > 1:
                        chunk = kind("".join(parts))
                yield chunk
            if finished:
                break
        await reader  # raises the source's failure, if any
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
