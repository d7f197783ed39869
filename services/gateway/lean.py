"""What the hot routes (a message's SSE stream, ``/v1/chat/completions``) run on.

Every message of an SSE client and every ``/v1`` request is one HTTP request, so what the
framework does per request is on its first token's way. ``LeanRoute`` keeps a route in
FastAPI's router and schema but calls its endpoint with the ``Request`` alone: no
dependency solving, exit stack or per-route exception wrapper (an error reaches the app's
``ExceptionMiddleware`` and its handlers, as from any route). ``EventStream`` is a
``StreamingResponse`` that watches for the client's disconnect with one plain task, where
Starlette's runs an anyio task group per response on uvicorn's ASGI 2.3 (a cancel scope,
whose cancel formats the task's repr). Per-sample A/B in docs/decisions.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class LeanRoute(APIRoute):
    """An ``APIRoute`` whose endpoint takes the ``Request`` and returns a ``Response``.

    Lean on the app's own router; in an included router FastAPI wraps the handler in its
    request-response app again (exit stacks, exception wrapper), though still without
    dependency solving: hot routes go on the app's router."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        call: Callable[[Request], Awaitable[Response]] = endpoint

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            response = await call(Request(scope, receive, send))
            await response(scope, receive, send)

        self.app = app

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The endpoint itself (what an included router wraps)."""
        return cast("Callable[[Request], Coroutine[Any, Any, Response]]", self.endpoint)


class EventStream(StreamingResponse):
    """``text/event-stream``; a client that goes away stops the body (its iterator is
    cancelled and closed, as with Starlette's response) and the request ends quietly."""

    media_type = "text/event-stream"

    def __init__(self, content: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(content, headers={**SSE_HEADERS, **(headers or {})})
        self._sent = False

    async def _watch(self, receive: Receive, streaming: asyncio.Task[Any]) -> None:
        """Cancel ``streaming`` when the client disconnects before the body is sent (checked
        and cancelled in one step of the loop: a body that ended is never cancelled)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self._sent:
            streaming.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.current_task()
        assert streaming is not None
        watcher = asyncio.create_task(self._watch(receive, streaming))
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            left = watcher.done() and not watcher.cancelled() and watcher.exception() is None
            if not left or streaming.uncancel():
                raise  # cancelled by someone else (a shutdown), not by the client's leaving
        finally:
            self._sent = True
            watcher.cancel()
