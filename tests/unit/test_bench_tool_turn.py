"""The bench's tool turn times its parts (to the tool call, to the answer's first token, the
answer), and the concurrency table reports their medians over the completed turns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import WSMsgType, web

from bench.concurrency import _by_part, _parts
from bench.sessions import Turn, tool_turn
from clients.python.ide import connect_ide
from tests.support.http_app import served

Serve = Callable[[list[str]], str]
"""The answer's tokens -> the stand-in's base URL."""


@pytest.fixture
async def gateway() -> AsyncIterator[Serve]:
    """A stand-in gateway: a user message is answered with a tool call, the tool result
    with the tokens a test names, each reply ending with its ``done``."""
    tokens: list[str] = []

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for frame in ws:
            if frame.type != WSMsgType.TEXT:
                break
            kind = json.loads(frame.data)["type"]
            if kind == "user_message":
                await ws.send_json({"type": "tool_call", "call_id": "c1", "tool": "read_file"})
                await ws.send_json({"type": "done", "status": "awaiting_tool_result"})
            elif kind == "tool_result":
                for token in tokens:
                    await ws.send_json({"type": "assistant_message", "token": token})
                await ws.send_json({"type": "done", "status": "completed"})
        return ws

    app = web.Application()
    app.router.add_get("/ws/{session}", socket)

    def serve(answer: list[str]) -> str:
        tokens[:] = answer
        return base

    async with served(app) as base:
        yield serve


async def test_a_streamed_answer_splits_the_turn_into_its_three_parts(gateway: Serve) -> None:
    ide = await connect_ide(gateway(["print", " one"]), "s1")
    try:
        turn = await tool_turn(ide, "read main.py")
    finally:
        await ide.close()
    assert turn.error is None
    assert (turn.tokens, turn.events) == (2, 2)
    assert turn.parts is not None
    assert all(part >= 0 for part in turn.parts)
    assert sum(turn.parts) <= turn.seconds


async def test_an_answer_without_tokens_has_no_parts(gateway: Serve) -> None:
    ide = await connect_ide(gateway([]), "s1")
    try:
        turn = await tool_turn(ide, "read main.py")
    finally:
        await ide.close()
    assert turn.error is None
    assert turn.tokens == 0
    assert turn.parts is None


def test_the_table_gives_each_part_s_median_over_the_completed_turns() -> None:
    turns = [
        Turn(parts=(1.0, 0.2, 2.0)),
        Turn(parts=(3.0, 0.4, 2.2)),
        Turn(parts=(2.0, 0.3, 2.1)),
        Turn(parts=(90.0, 90.0, 90.0), error="done with status 'error'"),
        Turn(),  # no streamed answer: not counted
    ]
    parts = _parts(turns)
    assert parts == pytest.approx(
        {"to the tool call": 2000.0, "to the answer's first token": 300.0, "the answer": 2100.0}
    )
    assert _by_part(parts) == (
        " (p50 by part: to the tool call 2,000 · to the answer's first token 300"
        " · the answer 2,100)"
    )
    assert _parts([Turn()]) == {}
    assert _by_part({}) == ""
