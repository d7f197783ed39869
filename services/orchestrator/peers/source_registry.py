"""Registering, listing and removing tool sources: Postgres first, then this replica's
connections (the other replicas follow within their poll interval)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from services.common.errors import NotFound
from services.orchestrator.peers.mcp_sources import McpSources, SourceStatus
from services.orchestrator.peers.tool_source import InvalidSource, parse_source
from services.orchestrator.state.tool_sources import SourceStore, StoredSource


class SourceNotFound(NotFound):
    """No active tool source has this name."""

    code = "MISSING_REQUIRED_FIELD"


@dataclass(frozen=True)
class SourceView:
    """A stored source with this replica's connection to it."""

    stored: StoredSource
    status: SourceStatus


class SourceRegistry:
    """The admin's view of tool sources."""

    def __init__(self, store: SourceStore, sources: McpSources) -> None:
        self.store = store
        self.sources = sources

    def _view(self, stored: StoredSource) -> SourceView:
        connection = self.sources.connections.get(stored.source.name)
        if connection is not None and connection.source == stored.source:
            return SourceView(stored, connection.status())
        waiting = SourceStatus(stored.source.name, "connecting", "", (), time.time())
        return SourceView(stored, waiting)

    async def register(self, definition_json: str, wait_seconds: float) -> SourceView:
        """Store the definition, connect, and wait up to ``wait_seconds`` for its tools."""
        try:
            raw = json.loads(definition_json or "null")
        except json.JSONDecodeError as error:
            raise InvalidSource(f"the definition is not JSON: {error.msg}") from None
        stored = await self.store.save(parse_source(raw))
        await self.sources.sync()
        connection = self.sources.connections.get(stored.source.name)
        if connection is not None:
            await connection.ready(wait_seconds)
        return self._view(stored)

    async def list(self) -> list[SourceView]:
        return [self._view(s) for s in await self.store.active()]

    async def get(self, name: str) -> SourceView:
        for stored in await self.store.active():
            if stored.source.name == name:
                return self._view(stored)
        raise SourceNotFound(f"no tool source {name!r}")

    async def remove(self, name: str) -> int:
        """The number of catalog tools that became inactive."""
        if not await self.store.remove(name):
            raise SourceNotFound(f"no tool source {name!r}")
        return await self.sources.removed(name)
