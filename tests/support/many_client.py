"""The client side of a CompleteMany call in unit tests: the envelopes a test writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from codelab.v1 import llmproxy_pb2 as pb


class Client:
    """The envelopes a test writes, then (``close``) the end of its writing."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[pb.CompleteEnvelope | None] = asyncio.Queue()

    def send(self, *envelopes: pb.CompleteEnvelope) -> None:
        for item in envelopes:
            self.queue.put_nowait(item)

    def close(self) -> None:
        self.queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[pb.CompleteEnvelope]:
        while (item := await self.queue.get()) is not None:
            yield item
