"""The WebSocket's API key, kept out of URLs.

A client sends its key in one of (first found wins):
- ``Authorization: Bearer <key>`` (clients that can set headers);
- ``Sec-WebSocket-Protocol: codelab, bearer.<key>`` (what a browser can send:
  ``new WebSocket(url, ["codelab", "bearer." + key])``); the server answers ``codelab``;
- a first message ``{"type": "auth", "token": "<key>"}`` within AUTH_SECONDS of the
  handshake (nothing else is read before it);
- ``?token=<key>``: deprecated (URLs end up in logs and proxies); still accepted, with a
  warning that never includes the key, and uvicorn's lines have it redacted.
A wrong key in the handshake is refused before the upgrade (HTTP 403); a missing or
wrong first ``auth`` message gets an ``UNAUTHORIZED`` error and close code 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from services.gateway.auth import Authenticator, bearer
from services.gateway.errors import TRANSPORT, Unauthorized

log = logging.getLogger(__name__)

SUBPROTOCOL = "codelab"
BEARER_PROTOCOL = "bearer."
AUTH_SECONDS = 10.0
POLICY_CLOSE = TRANSPORT[Unauthorized.kind].ws_close
"""A missing or wrong key closes the socket as a policy violation (1008)."""


@dataclass(frozen=True)
class Handshake:
    """The key the upgrade request carried (None: none), where, and the subprotocol."""

    key: str | None
    source: str
    subprotocol: str | None


def handshake_key(websocket: WebSocket) -> Handshake:
    offered: list[str] = list(websocket.scope.get("subprotocols") or ())
    chosen = SUBPROTOCOL if SUBPROTOCOL in offered else None
    key = bearer(websocket.headers)
    if key:
        return Handshake(key, "header", chosen)
    for protocol in offered:
        if protocol.startswith(BEARER_PROTOCOL) and len(protocol) > len(BEARER_PROTOCOL):
            return Handshake(protocol[len(BEARER_PROTOCOL) :], "subprotocol", chosen)
    token = websocket.query_params.get("token")
    if token:
        log.warning(
            "deprecated: an API key in the WebSocket URL (?token=); send it in "
            "Sec-WebSocket-Protocol (bearer.<key>) or a first auth message"
        )
        return Handshake(token, "query", chosen)
    return Handshake(None, "none", chosen)


async def first_message_key(websocket: WebSocket) -> str | None:
    """The key of a first ``{"type": "auth", "token" | "api_key"}`` message, if it is one."""
    try:
        async with asyncio.timeout(AUTH_SECONDS):
            frame = await websocket.receive()
    except TimeoutError:
        return None
    try:
        body: Any = json.loads(frame.get("text") or frame.get("bytes") or "")
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("type") != "auth":
        return None
    key = body.get("token") or body.get("api_key")
    return key if isinstance(key, str) and key else None


async def authenticate(websocket: WebSocket, auth: Authenticator) -> str | None:
    """Accept the socket and return its user; None when refused (the socket is closed)."""
    handshake = handshake_key(websocket)
    if not auth.enabled or auth.is_internal(websocket.headers):
        await websocket.accept(subprotocol=handshake.subprotocol)
        return ""
    if handshake.key is not None:
        user = await _user(auth, handshake.key)
        if user is None:
            await websocket.close(POLICY_CLOSE, "missing or invalid API key")
        else:
            await websocket.accept(subprotocol=handshake.subprotocol)
        return user
    await websocket.accept(subprotocol=handshake.subprotocol)
    key = await first_message_key(websocket)
    user = await _user(auth, key) if key else None
    if user is None:
        message = 'send the API key first: {"type": "auth", "token": "<key>"}'
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):  # gone already
            await websocket.send_json(
                {"type": "error", "error_code": "UNAUTHORIZED", "content": message}
            )
            await websocket.close(POLICY_CLOSE, "missing or invalid API key")
    return user


async def _user(auth: Authenticator, key: str) -> str | None:
    await auth.check(key)
    try:
        return auth.user_for({"authorization": f"Bearer {key}"})
    except Unauthorized:
        return None


class RedactKeys(logging.Filter):
    """Blanks ``token=`` / ``api_key=`` values in a log line (uvicorn logs a WebSocket's
    path with its query string)."""

    PATTERN = re.compile(r"([?&](?:token|api_key)=)[^&\s\"']*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.PATTERN.sub(r"\1[redacted]", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                self.PATTERN.sub(r"\1[redacted]", a) if isinstance(a, str) else a
                for a in record.args
            )
        return True


def redact_server_logs() -> None:
    """Install RedactKeys on uvicorn's loggers (once)."""
    for name in ("uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactKeys) for f in logger.filters):
            logger.addFilter(RedactKeys())
