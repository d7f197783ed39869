"""The completion stream honours the environment's proxy variables, read once per session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.llmproxy.http_stream import StreamingHttp, env_proxy

BODY = b'data: {"choices": []}\n\ndata: [DONE]\n\n'


class Recorder:
    """A plain HTTP server that notes each request line and answers with a short stream."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.lines.append(head.split(b"\r\n", 1)[0].decode())
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
            + BODY
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    found = Recorder()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


async def _post(http: StreamingHttp) -> bytes:
    try:
        async with http.post({"model": "m", "stream": True}, seconds=5) as body:
            return await body.read()
    finally:
        await http.close()


async def test_a_proxy_named_by_the_environment_carries_the_request(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{recorder.port}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    http = StreamingHttp("http://upstream.example/v1", "key")
    assert await _post(http) == BODY
    assert recorder.lines == ["POST http://upstream.example/v1/chat/completions HTTP/1.1"]


async def test_no_proxy_sends_straight_to_the_upstream(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    http = StreamingHttp(f"http://127.0.0.1:{recorder.port}/v1", "key")
    assert await _post(http) == BODY
    assert recorder.lines == ["POST /v1/chat/completions HTTP/1.1"]


def test_without_proxy_variables_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    assert env_proxy("https://api.openai.com/v1/chat/completions") is None
    monkeypatch.setenv("https_proxy", "http://proxy.corp:3128")
    assert env_proxy("https://api.openai.com/v1/chat/completions") == "http://proxy.corp:3128"
    assert env_proxy("http://api.openai.com/v1") is None  # only https is proxied
