"""The session's WebSocket, resumed after a drop, and the gateway's REST endpoints.

Only the public protocol: ``/ws/{sid}?last_event_id=N`` replays each event after N once;
every event seen is remembered by ``seq``, so a replayed one is never handled twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from clients.cli.errors import GatewayError
from clients.python.ide import Event, IdeConnection, connect_ide

RECONNECT_ATTEMPTS = 8
# Close code of a refusal (RFC 6455): the gateway sends it for a missing or wrong API key.
POLICY_VIOLATION = 1008


class Connection:
    """One session over the gateway: ``send`` and ``next_event``, across reconnects."""

    def __init__(self, base_url: str, session_id: str, *, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self.token = token
        self.last_seq: int | None = None
        self.reconnects = 0
        self._ide: IdeConnection | None = None

    async def open(self, *, replay_after: int | None = None) -> None:
        """Attach; ``replay_after`` first replays the events after that seq."""
        if replay_after is not None:
            self.last_seq = replay_after
        self._ide = await self._connect(self.last_seq)

    async def _connect(self, last_seq: int | None) -> IdeConnection:
        try:
            return await connect_ide(
                self.base_url, self.session_id, last_event_id=last_seq, token=self.token
            )
        except InvalidStatus as error:
            status = error.response.status_code
            raise GatewayError(f"the gateway refused the WebSocket ({status})") from error
        except (OSError, InvalidHandshake, TimeoutError) as error:
            raise GatewayError(f"cannot reach the gateway at {self.base_url}: {error}") from error

    async def resume(self) -> None:
        """Reconnect after a drop, asking for every event after the last one seen."""
        delay = 0.1
        for attempt in range(RECONNECT_ATTEMPTS):
            try:
                self._ide = await self._connect(self.last_seq)
            except GatewayError:
                if attempt == RECONNECT_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self.reconnects += 1
            return

    async def send(self, message: Mapping[str, Any]) -> None:
        """Send one message; when the socket drops, resume and resend it with the
        ``client_message_id`` it first went out with (it may have landed: the runtime
        applies it once)."""
        sent = dict(message)  # IdeConnection.send gives it its id, kept for the resend
        try:
            await self._socket().send(sent)
        except ConnectionClosed as closed:
            refused(closed)
            await self.resume()
            await self._socket().send(sent)

    async def next_event(self) -> Event:
        """The next event not seen before (resuming transparently when the socket drops)."""
        while True:
            try:
                event = await self._socket().next_event(None)
            except ConnectionClosed as closed:
                refused(closed)
                await self.resume()
                continue
            seq = event.get("seq")
            if isinstance(seq, int):
                if self.last_seq is not None and seq <= self.last_seq:
                    continue
                self.last_seq = seq
            return event

    def drop(self) -> None:
        """Cut the socket without a closing handshake (a network failure, for tests)."""
        self._socket().ws.transport.abort()

    async def close(self) -> None:
        if self._ide is not None:
            await self._ide.close()
            self._ide = None

    def _socket(self) -> IdeConnection:
        if self._ide is None:
            raise GatewayError("the session is not connected")
        return self._ide


def refused(closed: ConnectionClosed) -> None:
    """Raise for a close that reconnecting cannot mend (a policy refusal: a missing or
    wrong API key); return for a drop worth resuming."""
    frame = closed.rcvd
    if frame is not None and frame.code == POLICY_VIOLATION:
        reason = frame.reason or "policy violation"
        raise GatewayError(f"the gateway closed the session (UNAUTHORIZED: {reason})")


class Gateway:
    """The REST endpoints codelab reads: sessions, history, pending approvals, records."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, trust_env=False
        )

    async def get(self, path: str) -> Any:
        try:
            reply = await self._http.get(path)
        except httpx.HTTPError as error:
            raise GatewayError(f"cannot reach the gateway at {self.base_url}: {error}") from error
        if reply.status_code >= 400:
            raise GatewayError(_describe(reply))
        return reply.json()

    async def sessions(self) -> list[dict[str, Any]]:
        body = await self.get("/sessions")
        return list(body.get("sessions", []))

    async def history(self, session_id: str) -> list[dict[str, Any]]:
        return list((await self.get(f"/sessions/{quote(session_id, safe='')}/history"))["messages"])

    async def pending_approvals(self, session_id: str) -> list[dict[str, Any]]:
        body = await self.get(f"/sessions/{quote(session_id, safe='')}/pending-approvals")
        return list(body["pending_approvals"])

    async def executions(self, session_id: str) -> list[dict[str, Any]]:
        body = await self.get(f"/sessions/{quote(session_id, safe='')}/records")
        return list(body["records"]["executions"])

    async def close(self) -> None:
        await self._http.aclose()


def _describe(reply: httpx.Response) -> str:
    try:
        body = reply.json()
    except ValueError:
        return f"HTTP {reply.status_code}"
    if isinstance(body, dict) and body.get("error_code"):
        return f"{body['error_code']}: {body.get('content', '')}"
    return f"HTTP {reply.status_code}: {body}"
