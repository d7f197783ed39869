"""The upstream's streaming client against real HTTP servers that misbehave as real
providers do: refused connections, error bodies that are not JSON, a stream that stalls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from openai import AsyncOpenAI

from services.common.model_stream import ModelFinished, TextPiece
from services.common.ports import free_port
from services.llmproxy.errors import LlmError, LlmStreamInterrupted, LlmTimeout, LlmUnavailable
from services.llmproxy.upstream import CompletionRequest, Upstream
from tests.support.http_app import served

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REQUEST = CompletionRequest(messages=[{"role": "user", "content": "hi"}])


def upstream_at(url: str, retries: int = 0, timeout: float = 5.0) -> Upstream:
    client = AsyncOpenAI(base_url=url, api_key="k", max_retries=0, timeout=timeout)
    return Upstream(client, default_model="m", timeout=timeout, max_retries=retries, backoff=0.01)


async def drain(upstream: Upstream) -> list[object]:
    try:
        return [chunk async for chunk in upstream.complete(REQUEST)]
    finally:
        await upstream.close()


async def serving(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with served(app) as base:
        yield f"{base}/v1"


async def test_a_refused_connection_is_unavailable_after_the_retries() -> None:
    with pytest.raises(LlmUnavailable, match="unreachable"):
        await drain(upstream_at(f"http://127.0.0.1:{free_port()}/v1", retries=2))


@pytest.mark.parametrize(
    ("status", "body", "error", "text"),
    [
        (500, b"<html>boom</html>", LlmUnavailable, "500: <html>boom</html>"),
        (401, b'{"error": {"message": "Incorrect API key"}}', LlmError, "401: Incorrect API key"),
    ],
)
async def test_an_error_status_names_the_providers_message(
    status: int, body: bytes, error: type[LlmError], text: str
) -> None:
    calls = 0

    async def answer(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.Response(status=status, body=body)

    async for url in serving(answer):
        with pytest.raises(error, match=text) as caught:
            await drain(upstream_at(url, retries=1))
        assert caught.value.details["status"] == status
        assert calls == (2 if status == 500 else 1)  # only a 5xx is retried


async def test_a_stream_that_stalls_before_its_first_byte_times_out() -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(5)
        return response

    async for url in serving(stall):
        with pytest.raises(LlmTimeout):
            await drain(upstream_at(url, timeout=0.3))


async def test_a_stream_cut_after_its_first_token_is_interrupted() -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = b'{"choices":[{"index":0,"delta":{"content":"half"}}]}'
        await response.write(b"data: " + chunk + b"\n\n")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return response

    async for url in serving(cut):
        got: list[object] = []
        upstream = upstream_at(url, retries=2)
        with pytest.raises(LlmStreamInterrupted):
            async for piece in upstream.complete(REQUEST):
                got.append(piece)
        await upstream.close()
        assert got == [TextPiece("half")]
        assert not any(isinstance(p, ModelFinished) for p in got)
