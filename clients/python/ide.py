"""A small IDE over the gateway's WebSocket (``/ws/{session_id}``), for scripts and benchmarks.

It speaks the IDE's side of the protocol the README shows: JSON text frames in
(``user_message``, ``tool_result``, ``hitl_decision``, ``cancel``) and the runtime's events
out, each a dict with ``type``, ``session_id`` and ``seq``. A turn ends with a ``done``
event. Nothing here runs tools: the caller decides what a ``tool_call`` returns.

    async with open_ide("http://127.0.0.1:8000", "demo") as ide:
        await ide.user_message("hello")
        events = await ide.until_done()
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from websockets.asyncio.client import ClientConnection, connect

from clients.python.ids import with_client_id

Event = dict[str, Any]
"""One runtime event as the IDE sees it (decoded JSON)."""

DEFAULT_TIMEOUT = 30.0


class GatewayUnreachable(OSError):
    """No connection to the gateway (refused, unresolvable, timed out): seed 001's error."""

    code = "GATEWAY_UNREACHABLE"


def ws_url(base_url: str, session_id: str, *, last_event_id: int | None = None) -> str:
    """``ws://host/ws/<session>`` for a gateway base URL (``http://`` or ``ws://``).

    ``last_event_id`` replays the session's events after that seq. The API key never
    goes in the URL (see ``connect_ide``).
    """
    base = base_url.rstrip("/")
    for plain, socket_scheme in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(plain):
            base = socket_scheme + base[len(plain) :]
    query: dict[str, str] = {}
    if last_event_id is not None:
        query["last_event_id"] = str(last_event_id)
    suffix = f"?{urlencode(query)}" if query else ""
    return f"{base}/ws/{quote(session_id, safe='')}{suffix}"


def of_type(events: list[Event], kind: str) -> list[Event]:
    """The events of one ``type``, in order."""
    return [event for event in events if event.get("type") == kind]


def text_of(events: list[Event]) -> str:
    """The assistant's text in ``events``: streamed tokens and whole messages, joined."""
    return "".join(
        str(event.get("token") or event.get("content") or "")
        for event in of_type(events, "assistant_message")
    )


def is_done(event: Event) -> bool:
    """True for the ``done`` event that ends every turn."""
    return event.get("type") == "done"


class IdeConnection:
    """One IDE WebSocket attached to one session."""

    def __init__(self, ws: ClientConnection, session_id: str) -> None:
        self.ws = ws
        self.session_id = session_id

    async def send(self, message: Mapping[str, Any]) -> Event:
        """Send one IDE message as a JSON text frame; returns the message as sent.

        A message the runtime applies once (``user_message``, ``switch_agent``, ``cancel``,
        ``plan_decision``) gets a ``client_message_id`` when it has none, set on ``message``
        itself when it is a dict: sending that dict (or the one returned) again is a resend
        the runtime answers ``done`` ``duplicate``. Build a new dict for a new message."""
        sent = with_client_id(message if isinstance(message, dict) else dict(message))
        await self.ws.send(json.dumps(sent))
        return sent

    async def user_message(
        self,
        content: str,
        *,
        agent_type: str | None = None,
        client_message_id: str | None = None,
    ) -> Event:
        """Start a turn; ``agent_type`` picks the agent and skips the routing call.

        Returns the message as sent; pass its ``client_message_id`` back to resend it."""
        message: Event = {"type": "user_message", "content": content, "role": "user"}
        if agent_type:
            message["agent_type"] = agent_type
        if client_message_id is not None:
            message["client_message_id"] = client_message_id
        return await self.send(message)

    async def tool_result(self, call_id: str, result: Any = None, *, error: str = "") -> None:
        """Answer a ``tool_call`` the runtime dispatched to the IDE."""
        message: dict[str, Any] = {"type": "tool_result", "call_id": call_id}
        if error:
            message["error"] = error
        else:
            message["result"] = result
        await self.send(message)

    async def decide(self, call_id: str, decision: str, **extra: Any) -> None:
        """Answer a tool call that requires approval (approve | reject | edit)."""
        await self.send(
            {"type": "hitl_decision", "call_id": call_id, "decision": decision, **extra}
        )

    async def cancel(self, *, client_message_id: str | None = None) -> Event:
        """Ask the runtime to stop the running turn (a resend with the returned message's
        ``client_message_id`` cancels once)."""
        message: Event = {"type": "cancel"}
        if client_message_id is not None:
            message["client_message_id"] = client_message_id
        return await self.send(message)

    async def next_event(self, seconds: float | None = DEFAULT_TIMEOUT) -> Event:
        """The next event; TimeoutError when none arrives within ``seconds``."""
        if seconds is None:
            frame = await self.ws.recv()
        else:
            async with asyncio.timeout(seconds):
                frame = await self.ws.recv()
        event: Event = orjson.loads(frame)
        return event

    async def until(
        self, stop: Callable[[Event], bool], seconds: float | None = DEFAULT_TIMEOUT
    ) -> list[Event]:
        """Events up to and including the first for which ``stop`` is true.

        ``seconds`` bounds the whole wait, not each event: a stream that trickles
        forever still ends.
        """
        seen: list[Event] = []
        async with asyncio.timeout(seconds):
            while True:
                event = await self.next_event(None)
                seen.append(event)
                if stop(event):
                    return seen

    async def until_done(self, seconds: float | None = DEFAULT_TIMEOUT) -> list[Event]:
        """Events up to and including the next ``done``."""
        return await self.until(is_done, seconds)

    async def events(self) -> AsyncIterator[Event]:
        """Every event until the connection closes."""
        async for frame in self.ws:
            event: Event = orjson.loads(frame)
            yield event

    async def close(self) -> None:
        """Close the socket (the session and its events stay in the runtime)."""
        await self.ws.close()


async def connect_ide(
    base_url: str,
    session_id: str,
    *,
    last_event_id: int | None = None,
    token: str | None = None,
    open_timeout: float = DEFAULT_TIMEOUT,
    compression: str | None = None,
) -> IdeConnection:
    """Open a connection the caller closes (for holding many at once).

    ``proxy=None``: the gateway is dialled directly even when the environment names an
    HTTP proxy, as an IDE talking to a local runtime would. GatewayUnreachable
    (GATEWAY_UNREACHABLE) when nothing answers at ``base_url``.
    """
    url = ws_url(base_url, session_id, last_event_id=last_event_id)
    try:
        ws = await connect(
            url,
            # The gateway API key (deployments that set GATEWAY_API_KEYS), in a header.
            additional_headers={"Authorization": f"Bearer {token}"} if token else None,
            open_timeout=open_timeout,
            compression=compression,
            proxy=None,
            max_size=None,
        )
    except (OSError, TimeoutError) as error:
        raise GatewayUnreachable(f"cannot reach the gateway at {base_url}: {error}") from error
    return IdeConnection(ws, session_id)


@asynccontextmanager
async def open_ide(
    base_url: str,
    session_id: str,
    *,
    last_event_id: int | None = None,
    token: str | None = None,
    open_timeout: float = DEFAULT_TIMEOUT,
) -> AsyncIterator[IdeConnection]:
    """A connection for the duration of the block."""
    ide = await connect_ide(
        base_url, session_id, last_event_id=last_event_id, token=token, open_timeout=open_timeout
    )
    try:
        yield ide
    finally:
        await ide.close()
