"""Browsers: a CORS allow-list (GATEWAY_CORS_ORIGINS) and an origin guard.

A browser names the page that sent a request in ``Origin``. The gateway's own pages
(``/playground``) are same-origin and always allowed; other origins must be listed.
CORS alone only stops a page from *reading* answers: the guard also refuses the request
itself (HTTP 403, or a WebSocket closed before the upgrade), so a page on another site
cannot drive a gateway on localhost. Clients that are not browsers send no ``Origin``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.errors import TRANSPORT, Forbidden

ALLOWED_HEADERS = ["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"]


def origin_allowed(headers: Headers, allowed: Sequence[str]) -> bool:
    """No Origin (not a browser), a listed one, or the gateway's own."""
    origin = headers.get("origin")
    if origin is None:
        return True
    origin = origin.rstrip("/")
    if origin in allowed:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == headers.get("host", "")


class OriginGuard:
    """ASGI middleware refusing requests from browser origins not allowed."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.origins = tuple(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        if scope["type"] in ("http", "websocket") and not origin_allowed(
            Headers(scope=scope), self.origins
        ):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": TRANSPORT[Forbidden.kind].ws_close})
                return
            refused = Forbidden("this origin is not allowed (GATEWAY_CORS_ORIGINS)")
            await refused.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install_browser_guards(app: FastAPI, origins: Sequence[str]) -> None:
    """The guard inside, CORS outside (it answers listed origins' preflights)."""
    app.add_middleware(OriginGuard, origins=origins)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
        allow_headers=ALLOWED_HEADERS,
        expose_headers=["Retry-After"],
        max_age=600,
    )
