"""Connections to the registered MCP servers, shared by every session of the process.

Each active source has one connection (seed 003's shared clients) kept by a task of its
own: connect with the official ``mcp`` SDK, list the tools, publish them to the catalog,
then follow the server's list-changed events (``subscriptions/listen`` on 2026-era
servers, the ``tools/list_changed`` notification on older ones) and publish again. A
connection that fails or drops is retried with exponential back-off. ``McpSources.sync``
brings the set of connections in line with Postgres; every replica runs it periodically,
so a source registered through any replica reaches all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from services.common.errors import ErrorKind, ServiceError
from services.orchestrator import metrics
from services.orchestrator.peers.source_catalog import CatalogTool
from services.orchestrator.peers.tool_source import ToolOutcome, ToolSource, cap, resolve_secrets
from services.orchestrator.state.tool_sources import SourceStore

log = logging.getLogger(__name__)

EXECUTOR = "mcp"
SWEEP_GRACE = 30
"""Seconds added to a source's timeout in the catalog: the tool-timeout sweep closes a
running call only when the replica running it died, never while its own timeout runs."""
PING_EVERY = 10.0
"""Seconds between liveness pings of a server that cannot push list changes."""

Publish = Callable[[ToolSource, list[CatalogTool]], Awaitable[None]]


class SourceUnavailable(ServiceError):
    """The tool's MCP server is not connected (or the source was removed)."""

    code = "SERVICE_UNAVAILABLE"
    kind = ErrorKind.UNAVAILABLE


class CallTimedOut(ServiceError):
    """An MCP tool call took longer than its source's ``timeout_seconds``."""

    code = "TOOL_TIMEOUT"
    kind = ErrorKind.TIMEOUT


@dataclass(frozen=True)
class SourceStatus:
    """What ``/admin/tool-sources`` and ``/health`` show of a connection."""

    name: str
    state: str
    """connecting | connected | failed | stopped"""
    error: str
    tools: tuple[str, ...]
    since: float
    """Unix time of the last change of ``state``."""


def _text(result: mcp_types.CallToolResult) -> str:
    """The result's content blocks as text (structured content when there is no text)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            kind = getattr(block, "mime_type", None) or block.type
            parts.append(f"[{block.type}: {kind}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


class SourceConnection:
    """One MCP server, connected for as long as its source is registered."""

    def __init__(
        self,
        source: ToolSource,
        secrets: Mapping[str, str],
        publish: Publish,
        backoff_max: float = 30.0,
    ) -> None:
        self.source = source
        self.secrets = secrets
        self.publish = publish
        self.backoff_max = backoff_max
        self.state = "connecting"
        self.error = ""
        self.since = time.time()
        self.tools: dict[str, str] = {}
        """catalog name -> the server's name of the tool"""
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp source {self.source.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set_state("stopped")

    def status(self) -> SourceStatus:
        return SourceStatus(
            self.source.name, self.state, self.error, tuple(sorted(self.tools)), self.since
        )

    async def ready(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the first listing; True when connected."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._ready.wait()
        return self._ready.is_set()

    def _set_state(self, state: str, error: str = "") -> None:
        if state != self.state:
            self.since = time.time()
        self.state, self.error = state, error
        metrics.TOOL_SOURCE_UP.labels(self.source.name).set(1 if state == "connected" else 0)

    async def _target(self, stack: contextlib.AsyncExitStack) -> Any:
        """What ``Client`` connects to; an HTTP client of ours closes with ``stack``."""
        source = self.source
        if source.transport == "stdio":
            return StdioServerParameters(
                command=source.command,
                args=list(source.args),
                env=resolve_secrets(source.env, self.secrets) or None,
            )
        http = httpx2.AsyncClient(
            headers=resolve_secrets(source.headers, self.secrets),
            timeout=httpx2.Timeout(30.0, read=300.0),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(source.url, http_client=http)

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._connected()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the server, its transport or its listing failed
                self._set_state("failed", str(error) or type(error).__name__)
                log.warning(
                    "tool source failed",
                    extra={"fields": {"source": self.source.name, "err": self.error}},
                )
            finally:
                # A connection that served starts the back-off over.
                failures = 0 if self._ready.is_set() else failures
                self._ready.clear()
                self._client = None
            failures += 1
            await asyncio.sleep(min(self.backoff_max, 0.25 * 2**failures))
            if self.state != "failed":
                self._set_state("connecting")

    async def _connected(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            target = await self._target(stack)
            client = Client(target, message_handler=self._on_message, cache=None)
            await stack.enter_async_context(client)
            await self._refresh(client)
            self._client = client
            self._set_state("connected")
            self._ready.set()
            modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
            tools = client.server_capabilities.tools
            if modern and tools is not None and tools.list_changed:
                async with client.listen(tools_list_changed=True) as events:
                    async for _ in events:
                        await self._refresh(client)
                return  # the server closed the stream: connect again
            while True:
                try:
                    async with asyncio.timeout(PING_EVERY):
                        await self._changed.wait()
                except TimeoutError:
                    await client.send_ping()
                    continue
                self._changed.clear()
                await self._refresh(client)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()

    async def _refresh(self, client: Client) -> None:
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        source = self.source
        admitted = [t for t in listed if source.admits(t.name)]
        tools = [
            CatalogTool(
                name=source.catalog_name(t.name),
                description=(t.description or t.title or t.name).strip()[:2000],
                parameters=t.input_schema or {"type": "object", "properties": {}},
                executor=EXECUTOR,
                risk=source.risk_of(t.name),
                category=source.name,
                tags=("mcp", source.name),
                timeout_seconds=source.timeout_seconds + SWEEP_GRACE,
            )
            for t in admitted
        ]
        await self.publish(source, tools)
        self.tools = {source.catalog_name(t.name): t.name for t in admitted}

    async def call(self, catalog_name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one tool on the server; the server's own errors come back as a failed
        outcome, a missing connection or a timeout as ServiceError."""
        source = self.source
        if not await self.ready(min(5.0, float(source.timeout_seconds))):
            raise SourceUnavailable(
                f"tool source {source.name!r} is not connected"
                + (f": {self.error}" if self.error else "")
            )
        client = self._client
        name = self.tools.get(catalog_name)
        if client is None or name is None:
            raise SourceUnavailable(f"{catalog_name} is no longer offered by {source.name!r}")
        seconds = float(source.timeout_seconds)
        late = f"{catalog_name} timed out after {source.timeout_seconds} s"
        try:
            async with asyncio.timeout(seconds + 1):
                result = await client.call_tool(name, arguments, read_timeout_seconds=seconds)
        except TimeoutError:
            raise CallTimedOut(late) from None
        except MCPError as error:
            if "timed out" in str(error):
                raise CallTimedOut(late) from None
            return ToolOutcome(f"Error: {error}", False)
        text = cap(_text(result), source.max_output_chars)
        return ToolOutcome(text, not result.is_error)


class McpSources:
    """Every active source's connection in this process."""

    def __init__(
        self,
        store: SourceStore,
        publish: Publish,
        retire: Callable[[str], Awaitable[int]],
        secrets: Mapping[str, str],
        poll_seconds: float = 5.0,
        backoff_max: float = 30.0,
    ) -> None:
        self.store = store
        self.publish = publish
        self.retire = retire
        self.secrets = secrets
        self.poll_seconds = poll_seconds
        self.backoff_max = backoff_max
        self.connections: dict[str, SourceConnection] = {}
        self._lock = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.sync()
        self._poller = asyncio.create_task(self._poll(), name="mcp sources poll")

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for connection in list(self.connections.values()):
            await connection.stop()
        self.connections.clear()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.sync()
            except ServiceError as error:  # Postgres away: keep the connections we have
                log.warning("tool sources not synced", extra={"fields": {"err": error.message}})

    async def sync(self) -> None:
        """Connect new or changed sources, drop removed ones (their tools stay as the
        replica that removed them left them)."""
        async with self._lock:
            wanted = {s.source.name: s.source for s in await self.store.active()}
            for name, connection in list(self.connections.items()):
                if wanted.get(name) != connection.source:
                    await connection.stop()
                    del self.connections[name]
            for name, source in wanted.items():
                if name not in self.connections:
                    connection = SourceConnection(
                        source, self.secrets, self.publish, self.backoff_max
                    )
                    self.connections[name] = connection
                    connection.start()

    async def removed(self, name: str) -> int:
        """Source ``name`` was removed: disconnect; its tools go inactive (how many)."""
        async with self._lock:
            connection = self.connections.pop(name, None)
            if connection is not None:
                await connection.stop()
        return await self.retire(name)

    def status(self) -> list[SourceStatus]:
        return [c.status() for c in self.connections.values()]

    def connection_for(self, catalog_name: str) -> SourceConnection:
        source, _, _ = catalog_name.partition(".")
        connection = self.connections.get(source)
        if connection is None:
            raise SourceUnavailable(f"no tool source {source!r} is registered")
        return connection
