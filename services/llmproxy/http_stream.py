"""The streaming POST of a chat completion, over aiohttp.

The ``openai`` SDK stays for the rest of the upstream's API (embeddings, models); the
completion stream is the hot path and goes around it. Profiled at 100 sessions paced at
50 tokens/s, reading the body through the SDK's httpx/httpcore/anyio stack was a third of
llmproxy's CPU (a cancel scope, a timeout and several context managers per chunk) and
sending the request another tenth; aiohttp reads the same bytes with its C parser.

Proxy variables are read once, when the session opens: aiohttp's ``trust_env`` reads
them and ``~/.netrc`` again on every request, in a worker thread (a third of llmproxy's
CPU with 1,000 live sessions).

A request that meets a pooled connection the upstream is closing is sent again at once, once,
on a new connection of its own.
Servers close a keep-alive connection after its idle timeout (uvicorn and Node: 5 s, against
aiohttp's 15), and a request written as that close crosses it fails before any response
byte: ``ServerDisconnectedError``, or ``ClientOSError`` when the body's write met the close
(a connection that could not be made is neither, and is not sent again here). Left to the
model-call retry it waited its back-off, 0.25-0.375 s on that turn's first token; the
bench's live passes met it 1-5 times a run after their idle gaps. Go's HTTP client resends
such a request on its own; a second failure is the caller's, with its back-off. The resend
does not take another pooled connection: connections a burst used together go idle together
and the upstream closes them in the same instant, so the next one in the pool is likely as
stale (the bench still logged a back-off retry a run when it did).
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
import orjson

from services.llmproxy.errors import UpstreamStatus

USER_AGENT = "codelab-llmproxy"


def error_details(status: int, body: bytes) -> tuple[str, str | None]:
    """(``error.message`` or the body's start, ``error.code``) of an error body."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
        message, code = error.get("message"), error.get("code")
        if isinstance(message, str) and message:
            return message, code if isinstance(code, str) else None
    text = body[:500].decode("utf-8", "replace").strip()
    return text or f"HTTP {status}", None


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date; OpenAI's
    ``retry-after-ms`` first); None without a usable one."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``, ``NO_PROXY``), as
    the SDK's client honours them; credentials go in the proxy's URL."""
    parts = urlsplit(url)
    if parts.hostname and proxy_bypass(parts.hostname):
        return None
    return getproxies().get(parts.scheme)


class StreamingHttp:
    """One aiohttp session per process, opened on first use (it needs the running loop)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "User-Agent": USER_AGENT,
        }
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        """By ``pooled``: False is for a resend, each request on a new connection closed
        after its response."""

    def _client(self, *, pooled: bool = True) -> aiohttp.ClientSession:
        session = self._sessions.get(pooled)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, force_close=not pooled)
            session = aiohttp.ClientSession(connector=connector, proxy=env_proxy(self.url))
            self._sessions[pooled] = session
        return session

    @contextlib.asynccontextmanager
    async def post(
        self, body: dict[str, Any], seconds: float
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """POST ``body``; yields the response body to read as it arrives. ``seconds`` bounds
        the connection and every wait for bytes (as the SDK's timeout does), not the whole
        stream. A status other than 2xx raises ``UpstreamStatus``."""
        limits = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
        data = orjson.dumps(body)
        try:
            response = await self._send(data, limits)
        except aiohttp.ClientConnectorError:
            raise  # no connection was made: the caller's back-off decides
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # a pooled connection closed while idle: again, on a connection of its own
            response = await self._send(data, limits, pooled=False)
        async with response:
            if response.status >= 300:
                message, code = error_details(response.status, await response.read())
                wait = retry_after({k.lower(): v for k, v in response.headers.items()})
                raise UpstreamStatus(response.status, message, code, wait)
            yield response.content

    async def _send(
        self, data: bytes, limits: aiohttp.ClientTimeout, *, pooled: bool = True
    ) -> aiohttp.ClientResponse:
        """The response, its head read."""
        client = self._client(pooled=pooled)
        return await client.post(self.url, data=data, headers=self.headers, timeout=limits)

    async def close(self) -> None:
        """Close the sessions and their connections."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
