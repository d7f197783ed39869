"""The hot routes' SSE response: a client that leaves stops its body, a body that ends
ends the request, and a cancellation from elsewhere (a shutdown) is not swallowed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from starlette.responses import PlainTextResponse

from clients.python import MeshClient
from services.common.settings import Settings
from services.gateway.app import create_app
from services.gateway.lean import EventStream, LeanRoute

SCOPE: dict[str, Any] = {"type": "http", "asgi": {"spec_version": "2.3"}}


class Client:
    """An ASGI client: records what is sent; ``receive`` answers the request's body, then
    waits until the client leaves."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self.asked = False
        self.first_chunk = asyncio.Event()
        self.watch_cancelled = False

    async def receive(self) -> dict[str, Any]:
        if not self.asked:
            self.asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        try:
            await self.gone.wait()
        except asyncio.CancelledError:
            self.watch_cancelled = True
            raise
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)
        if message.get("body"):
            self.first_chunk.set()

    def bodies(self) -> list[tuple[bytes, bool]]:
        kept = [m for m in self.sent if m["type"] == "http.response.body"]
        return [(m["body"], m["more_body"]) for m in kept]


class Body:
    """A frame, then (unless ``ends``) nothing until cancelled; records being closed."""

    def __init__(self, ends: bool) -> None:
        self.ends = ends
        self.closed = False

    async def frames(self) -> AsyncIterator[str]:
        try:
            yield "data: 1\n\n"
            await asyncio.sleep(0)  # the disconnect watch starts waiting meanwhile
            if not self.ends:
                await asyncio.Event().wait()
        finally:
            self.closed = True


async def test_a_client_that_leaves_stops_the_body_and_the_request_ends_quietly() -> None:
    client, body = Client(), Body(ends=False)
    response = EventStream(body.frames(), {"X-CodeLab-Session": "s"})
    request = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await asyncio.wait_for(client.first_chunk.wait(), 5)
    client.gone.set()
    done, _ = await asyncio.wait([request], timeout=5)
    assert done == {request} and request.result() is None  # no CancelledError out of it
    assert body.closed
    assert client.bodies() == [(b"data: 1\n\n", True)]  # nothing after the client left
    headers = dict(client.sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert (headers[b"cache-control"], headers[b"x-codelab-session"]) == (b"no-cache", b"s")


async def test_a_body_that_ends_ends_the_request_and_its_watch() -> None:
    client, body = Client(), Body(ends=True)
    await asyncio.wait_for(EventStream(body.frames())(SCOPE, client.receive, client.send), 5)
    assert client.bodies() == [(b"data: 1\n\n", True), (b"", False)]
    await asyncio.sleep(0)
    assert client.watch_cancelled and body.closed


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_client_leaving() -> None:
    client, body = Client(), Body(ends=False)
    request = asyncio.create_task(EventStream(body.frames())(SCOPE, client.receive, client.send))
    await asyncio.wait_for(client.first_chunk.wait(), 5)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert body.closed
    await asyncio.sleep(0)
    assert client.watch_cancelled


async def lean_endpoint(raw):  # type: ignore[no-untyped-def]  # no annotation: not FastAPI's
    return PlainTextResponse(f"{raw.method} {raw.url.path}")


@pytest.mark.parametrize("included", [False, True], ids=["app-router", "included-router"])
async def test_a_lean_route_calls_its_endpoint_with_the_request_alone(included: bool) -> None:
    """FastAPI's own handler would read ``raw`` as a required query parameter (422)."""
    app = FastAPI()
    if included:
        router = APIRouter(prefix="/v1")
        router.add_api_route(
            "/hot", lean_endpoint, methods=["POST"], route_class_override=LeanRoute
        )
        app.include_router(router)
    else:
        app.router.add_api_route(
            "/v1/hot", lean_endpoint, methods=["POST"], route_class_override=LeanRoute
        )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        reply = await http.post("/v1/hot")
    assert (reply.status_code, reply.text) == (200, "POST /v1/hot")


async def test_the_gateways_hot_routes_are_lean_on_its_own_router() -> None:
    client = MeshClient(internal_api_key="k", orchestrator_addr="127.0.0.1:1")
    try:
        app = create_app(Settings(internal_api_key="k"), client)
        routes = app.router.routes
        lean = [i for i, r in enumerate(routes) if isinstance(r, LeanRoute)]
        assert [getattr(routes[i], "path", "") for i in lean] == [
            "/agent/message/stream",
            "/v1/chat/completions",
        ]
        # On the app's own router, matched before any included router's routes.
        included = [i for i, r in enumerate(routes) if not hasattr(r, "path")]
        assert included and max(lean) < min(included)
    finally:
        await client.close()
