"""ListTools' answer, built once per catalog version and never in one piece.

Listing 10,000 tools took ~200 ms of toolsearch's event loop (py-spy: each row's jsonb
parameters decoded by the driver and encoded again, a message built per tool), and every
search waited behind it; each orchestrator replica lists the whole catalog when the version
moves, so an import stalled searches once per replica. Now a listing's messages are built
from the parameters' JSON text, a few hundred between yields to the loop, and the whole
answer is kept for the catalog version read before its rows: the rows are at least as new as
that version, and a change after it moves the version, so the next listing reads again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from codelab.v1 import toolsearch_pb2 as pb
from services.common.slices import in_slices
from services.toolsearch.store import ToolStore

CHUNK = 250
"""Messages built between yields (~2 ms of the loop)."""


async def build(rows: Sequence[Mapping[str, Any]]) -> pb.ListToolsResponse:
    """The answer listing ``rows`` (their columns are ToolSpec's fields), letting the loop
    run between chunks."""
    response = pb.ListToolsResponse()
    async for chunk in in_slices(rows, CHUNK):
        for row in chunk:
            response.tools.add(**row)
    return response


class Listing:
    """The current active tools, by name, as ListTools answers them."""

    def __init__(self, store: ToolStore) -> None:
        self.store = store
        self._version: int | None = None
        self._whole = pb.ListToolsResponse()
        self._lock = asyncio.Lock()

    async def tools(self, names: Sequence[str]) -> pb.ListToolsResponse:
        """Every current active tool, or those of ``names`` (the answer is shared: read only)."""
        version = await self.store.catalog_version()
        if names and version != self._version:  # a few tools: not worth the whole catalog
            return await build(await self.store.listed(names))
        async with self._lock:  # concurrent listings of a new version build it once
            if version != self._version:
                self._whole = await build(await self.store.listed(()))
                self._version = version
        if not names:
            return self._whole
        wanted = set(names)
        return pb.ListToolsResponse(tools=[t for t in self._whole.tools if t.name in wanted])
