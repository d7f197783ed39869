"""A pooled connection the upstream closed while idle is retried at once, once.

An HTTP server closes a keep-alive connection after its idle timeout (uvicorn and Node 5 s);
a request written as that close crosses it fails before any response byte with aiohttp's
``ServerDisconnectedError``. The upstream never saw the request, so the stream sends it
again on a new connection of its own instead of leaving it to the model-call retry and its
back-off (a quarter of a second or more on a turn's first token); not on another pooled
one, which went idle with it and is closed with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from services.llmproxy.http_stream import StreamingHttp

BODY = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
    + BODY
)


class Upstream:
    """A keep-alive HTTP server: each connection answers ``answered_per_connection``
    requests, then closes on the next one without a byte of answer."""

    def __init__(self, answered_per_connection: int) -> None:
        self.answered_per_connection = answered_per_connection
        self.connections = 0
        self.requests = 0
        self.answered = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.requests += 1
                if served == self.answered_per_connection:
                    return  # closed as the request arrived: no byte of an answer
                writer.write(ANSWER)
                await writer.drain()
                served += 1
                self.answered += 1
        except asyncio.IncompleteReadError:
            return
        finally:
            writer.close()


async def _serving(upstream: Upstream) -> AsyncIterator[Upstream]:
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    upstream.port = server.sockets[0].getsockname()[1]
    async with server:
        yield upstream


@pytest.fixture
async def closes_after_one() -> AsyncIterator[Upstream]:
    async for upstream in _serving(Upstream(answered_per_connection=1)):
        yield upstream


@pytest.fixture
async def closes_every_one() -> AsyncIterator[Upstream]:
    async for upstream in _serving(Upstream(answered_per_connection=0)):
        yield upstream


async def _read(http: StreamingHttp) -> bytes:
    async with http.post({"model": "m", "stream": True}, seconds=5) as body:
        return await body.read()


async def test_a_closed_pooled_connection_is_retried_on_another_at_once(
    closes_after_one: Upstream,
) -> None:
    http = StreamingHttp(f"http://127.0.0.1:{closes_after_one.port}/v1", "key")
    try:
        assert await _read(http) == BODY  # a new connection, kept in the pool
        assert await _read(http) == BODY  # reuses it, the upstream closes it, sent again
    finally:
        await http.close()
    assert closes_after_one.requests == 3
    assert closes_after_one.answered == 2
    assert closes_after_one.connections == 2


async def test_the_resend_takes_a_new_connection_not_another_pooled_one(
    closes_after_one: Upstream,
) -> None:
    """Two connections used together go idle together: the first request after finds both
    closing; its resend on the second pooled one would fail as well."""
    http = StreamingHttp(f"http://127.0.0.1:{closes_after_one.port}/v1", "key")
    try:
        assert list(await asyncio.gather(_read(http), _read(http))) == [BODY, BODY]
        assert closes_after_one.connections == 2  # both kept in the pool
        assert await _read(http) == BODY  # a pooled one closes; the resend opens a third
        assert await _read(http) == BODY  # the other pooled one closes; a fourth
    finally:
        await http.close()
    assert closes_after_one.connections == 4
    assert closes_after_one.requests == 6
    assert closes_after_one.answered == 4


async def test_an_upstream_that_closes_every_request_is_asked_twice_then_it_is_an_error(
    closes_every_one: Upstream,
) -> None:
    http = StreamingHttp(f"http://127.0.0.1:{closes_every_one.port}/v1", "key")
    try:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await _read(http)
    finally:
        await http.close()
    assert closes_every_one.requests == 2  # one retry of its own; the rest is the caller's
    assert closes_every_one.answered == 0


class CountedSends(StreamingHttp):
    """The stream with its sends counted; the first ``failures`` raise ``error``."""

    def __init__(self, url: str, error: Exception | None, failures: int) -> None:
        super().__init__(url, "key")
        self.error, self.failures, self.sends = error, failures, 0

    async def _send(
        self, data: bytes, limits: aiohttp.ClientTimeout, *, pooled: bool = True
    ) -> aiohttp.ClientResponse:
        self.sends += 1
        if self.error is not None and self.sends <= self.failures:
            raise self.error
        return await super()._send(data, limits, pooled=pooled)


async def test_a_body_write_that_met_the_close_is_sent_again(closes_after_one: Upstream) -> None:
    written = aiohttp.ClientOSError(None, "Can not write request body")
    http = CountedSends(f"http://127.0.0.1:{closes_after_one.port}/v1", written, failures=1)
    try:
        assert await _read(http) == BODY
    finally:
        await http.close()
    assert http.sends == 2
    assert closes_after_one.requests == 1


async def test_a_connection_that_cannot_be_made_is_not_sent_again_here() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()  # nothing listens on the port now
    http = CountedSends(f"http://127.0.0.1:{port}/v1", None, failures=0)
    try:
        with pytest.raises(aiohttp.ClientConnectorError):
            await _read(http)
    finally:
        await http.close()
    assert http.sends == 1
