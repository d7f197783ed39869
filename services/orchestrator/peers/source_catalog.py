"""A tool source's tools in toolsearch's catalog: upserted as listed, inactive when gone.

Every orchestrator replica connected to a source writes the same listing; UpsertTools
makes a new version only when a tool changed, so the writes agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codelab.v1 import toolsearch_pb2, toolsearch_pb2_grpc
from services.orchestrator.peers.mesh_clients import call


@dataclass(frozen=True)
class CatalogTool:
    """One tool as the catalog stores it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    executor: str
    risk: str
    category: str = ""
    tags: tuple[str, ...] = ()
    timeout_seconds: int = 0


class SourceCatalog:
    """Writes tool sources' listings into toolsearch."""

    def __init__(self, stub: toolsearch_pb2_grpc.ToolSearchAsyncStub) -> None:
        self.stub = stub

    async def listed(self, prefix: str, executor: str) -> list[toolsearch_pb2.ToolSpec]:
        """The active catalog tools of one source (names starting with ``prefix``)."""
        reply = await call(lambda: self.stub.ListTools(toolsearch_pb2.ListToolsRequest()))
        return [t for t in reply.tools if t.name.startswith(prefix) and t.executor == executor]

    async def sync(self, prefix: str, executor: str, tools: Sequence[CatalogTool]) -> int:
        """Upsert ``tools``; the source's other active tools become inactive. Returns how
        many were deactivated."""
        names = {t.name for t in tools}
        gone = [t for t in await self.listed(prefix, executor) if t.name not in names]
        inputs = [
            toolsearch_pb2.ToolInput(
                name=t.name,
                description=t.description,
                parameters_json=json.dumps(dict(t.parameters)),
                executor=t.executor,
                risk=t.risk,
                category=t.category,
                tags=list(t.tags),
                timeout_seconds=t.timeout_seconds,
            )
            for t in tools
        ]
        inputs.extend(
            toolsearch_pb2.ToolInput(
                name=t.name,
                description=t.description,
                parameters_json=t.parameters_json,
                executor=t.executor,
                risk=t.risk,
                category=t.category,
                tags=list(t.tags),
                inactive=True,
            )
            for t in gone
        )
        if inputs:
            request = toolsearch_pb2.UpsertToolsRequest(tools=inputs)
            await call(lambda: self.stub.UpsertTools(request))
        return len(gone)

    async def retire(self, prefix: str, executor: str) -> int:
        """Every active tool of the source becomes inactive; how many."""
        return await self.sync(prefix, executor, ())
