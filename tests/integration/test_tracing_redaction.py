"""Keys stay out of exported traces: the ASGI instrumentation records a request's full URL,
so a WebSocket opened with the deprecated ``?token=`` would otherwise ship its key to the
trace backend in clear."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import websockets
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common import tracing
from tests.support.mesh import Mesh, running_mesh

KEY = "k-alice-0123456789"


@pytest.fixture
async def mesh(database_url: str, exporter: InMemorySpanExporter) -> AsyncIterator[Mesh]:
    keys = {KEY: "alice"}
    async with running_mesh(database_url, multi_agent_mode=False, gateway_api_keys=keys) as mesh:
        yield mesh


def everything_exported(span: ReadableSpan) -> str:
    """The text a backend receives for ``span``: name, attributes, events, resource."""
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    parts = [span.name, dict(span.attributes or {}), events, dict(span.resource.attributes)]
    return json.dumps(parts, default=str)


async def finished_request_spans(
    exporter: InMemorySpanExporter, path: str, count: int
) -> list[ReadableSpan]:
    """The gateway's server spans for ``path`` once ``count`` of them ended (a
    WebSocket's span ends when the connection closes, a moment after the client's close)."""
    async with asyncio.timeout(10):
        while True:
            found = [
                s
                for s in exporter.get_finished_spans()
                if s.kind.name == "SERVER" and path in everything_exported(s)
            ]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.02)


async def test_a_websocket_opened_with_a_token_exports_no_key(
    mesh: Mesh, exporter: InMemorySpanExporter
) -> None:
    mesh.scripted.enqueue({"text": "traced without the key"})
    async with websockets.connect(mesh.ws_url("redacted", f"token={KEY}&last_event_id=-1")) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "hello"}))
        async with asyncio.timeout(20):
            while json.loads(await ws.recv())["type"] != "done":
                pass
    [connection] = await finished_request_spans(exporter, "/ws/redacted", 1)
    shown = everything_exported(connection)
    # The URL is still recorded, with the key's value blanked and other parameters kept.
    assert "token=REDACTED" in shown and "last_event_id=-1" in shown, shown
    assert all(KEY not in everything_exported(s) for s in exporter.get_finished_spans())


async def test_a_key_in_a_rest_query_is_redacted_too(
    mesh: Mesh, exporter: InMemorySpanExporter
) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        listed = await http.get(f"/sessions?api_key={KEY}&limit=5")
    assert listed.status_code == 401  # the query string never authenticates REST
    [request] = await finished_request_spans(exporter, "/sessions", 1)
    assert "api_key=REDACTED" in everything_exported(request)
    assert all(KEY not in everything_exported(s) for s in exporter.get_finished_spans())


def test_every_spelling_of_a_secret_value_is_found() -> None:
    query = "token=a%2Bb+c&last_event_id=3&X-Api-Key=k1&apikey=&page=2"
    assert tracing.secret_query_values(query) == ["a%2Bb+c", "a+b c", "a+b+c", "k1"]
    assert tracing.secret_query_values("last_event_id=3&format=seed000") == []
