"""The bench's lean replay client: it times up to the last event and refuses a replay that
ends short or carries a frame that is not an event."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web

from bench.persistence import lean_replay_ms
from tests.support.http_app import served

Serve = Callable[[list[str | bytes]], tuple[str, list[str]]]
"""Frames to send -> (the stand-in's base URL, the paths asked for)."""


@pytest.fixture
async def gateway() -> AsyncIterator[Serve]:
    """A stand-in gateway whose socket sends the frames a test names, then closes."""
    frames: list[str | bytes] = []
    asked: list[str] = []

    async def socket(request: web.Request) -> web.WebSocketResponse:
        asked.append(request.path_qs)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        for frame in frames:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/ws/{session}", socket)

    def serve(sent: list[str | bytes]) -> tuple[str, list[str]]:
        frames[:] = sent
        return base, asked

    async with served(app) as base:
        yield serve


async def test_a_replay_is_timed_to_its_last_event(gateway: Serve) -> None:
    base, asked = gateway([f'{{"seq": {n}}}' for n in (1, 2, 3)])
    async with aiohttp.ClientSession() as http:
        assert await lean_replay_ms(http, base, "s1", 3) > 0
    assert asked == ["/ws/s1?last_event_id=0"]


async def test_a_replay_that_ends_short_is_refused(gateway: Serve) -> None:
    base, _ = gateway(['{"seq": 1}', '{"seq": 2}'])
    async with aiohttp.ClientSession() as http:
        with pytest.raises(RuntimeError, match="before its last event"):
            await lean_replay_ms(http, base, "s1", 3)


async def test_a_frame_that_is_not_an_event_is_refused(gateway: Serve) -> None:
    base, _ = gateway(['{"seq": 1}', b"\x00"])
    async with aiohttp.ClientSession() as http:
        with pytest.raises(RuntimeError, match="ended early: BINARY"):
            await lean_replay_ms(http, base, "s1", 3)
