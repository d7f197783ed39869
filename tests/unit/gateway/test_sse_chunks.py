"""SSE: events the runtime sent together leave as one body chunk (a replayed page, a
burst), events that arrive apart as chunks of their own; every frame is there, in order,
and a turn still ends at its ``done``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

from clients.python import SessionStream
from codelab.v1 import common_pb2 as pb
from services.gateway.held_streams import StreamReader
from services.gateway.streaming import sse_events


def token(seq: int) -> pb.ServerEvent:
    message = pb.AssistantMessage(token=f"t{seq}", agent="coder", message_id="m")
    return pb.ServerEvent(assistant_message=message, session_id="s", seq=seq)


def done(seq: int) -> pb.ServerEvent:
    return pb.ServerEvent(done=pb.Done(status="completed"), session_id="s", seq=seq)


class Arrivals:
    """A stream whose events arrive in groups: each group at once, the next one when
    ``go`` is set; then it ends."""

    def __init__(self, *groups: list[pb.ServerEvent]) -> None:
        self.groups = groups
        self.go = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[pb.ServerEvent]:
        for n, group in enumerate(self.groups):
            if n:
                await self.go.wait()
                self.go.clear()
            for event in group:
                yield event

    def close(self) -> None:
        pass


async def chunks(stream: Arrivals, *, follow: bool) -> list[str]:
    reader = StreamReader(cast(SessionStream, stream))
    out: list[str] = []
    async for chunk in sse_events(reader, "s", heartbeat=5, idle_timeout=30, follow=follow):
        out.append(chunk)
        await asyncio.sleep(0)  # the reader has put what it had
        stream.go.set()
    return out


def ids(chunk: str) -> list[str]:
    return [line for line in chunk.splitlines() if line.startswith("id: ")]


async def test_a_batch_is_one_chunk_and_a_later_event_its_own() -> None:
    stream = Arrivals([token(1), token(2), token(3)], [token(4)])
    got = await chunks(stream, follow=True)
    assert [ids(c) for c in got] == [["id: 1", "id: 2", "id: 3"], ["id: 4"]]
    # The stream's end was read with the last event: its frame follows it in that chunk.
    assert got[-1].endswith('event: done\ndata: {"status":"closed"}\n\n')


async def test_a_turn_read_together_ends_at_its_done_in_the_same_chunk() -> None:
    stream = Arrivals([token(1), token(2), done(3), token(4)])
    got = await chunks(stream, follow=False)
    assert len(got) == 1
    assert ids(got[0]) == ["id: 1", "id: 2", "id: 3"]
    assert got[0].endswith("\n\n") and "event: done" in got[0] and "t4" not in got[0]
