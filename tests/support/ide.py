"""A minimal IDE over the gateway's WebSocket, for flow tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import websockets

from tests.support.mesh import Mesh

Event = dict[str, Any]


class Ide:
    """Sends the IDE's messages and collects the runtime's events."""

    def __init__(self, ws: Any, session_id: str) -> None:
        self.ws = ws
        self.session_id = session_id
        self.seen: list[Event] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def turn(self, message: dict[str, Any]) -> list[Event]:
        """Send ``message`` and return the events up to the next ``done``."""
        await self.send(message)
        return await self.until_done()

    async def say(self, text: str, **extra: Any) -> list[Event]:
        return await self.turn({"type": "user_message", "content": text, **extra})

    async def until_done(self, seconds: float = 20) -> list[Event]:
        events: list[Event] = []
        async with asyncio.timeout(seconds):
            while True:
                event = json.loads(await self.ws.recv())
                events.append(event)
                self.seen.append(event)
                if event["type"] == "done":
                    return events

    async def result(self, call_id: str, result: Any) -> list[Event]:
        return await self.turn({"type": "tool_result", "call_id": call_id, "result": result})

    async def decide(self, call_id: str, decision: str, **extra: Any) -> list[Event]:
        return await self.turn(
            {"type": "hitl_decision", "call_id": call_id, "decision": decision, **extra}
        )


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["type"] == kind]


def text_of(events: list[Event]) -> str:
    return "".join(
        e.get("token", "") or e.get("content", "") for e in of(events, "assistant_message")
    )


@asynccontextmanager
async def ide(mesh: Mesh, session_id: str) -> AsyncIterator[Ide]:
    async with websockets.connect(mesh.ws_url(session_id)) as ws:
        yield Ide(ws, session_id)
