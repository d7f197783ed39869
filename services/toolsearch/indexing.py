"""Writing the catalog: a new version (and one embedding) only when a definition changed.

Embedding is slow (tens of ms a tool) and must not run inside the write transaction,
so an import looks first, embeds what looks changed, then re-checks under the catalog
lock and writes. Only a concurrent writer changing the same tool in between makes the
locked step embed anything itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from services.toolsearch.catalog import Tool, ToolDraft, dense_text
from services.toolsearch.embedder import Embedder
from services.toolsearch.errors import InvalidTool
from services.toolsearch.store import Stored, ToolStore

log = logging.getLogger(__name__)
MAX_TOOLS_PER_CALL = 10_000


@dataclass(frozen=True)
class Upserted:
    """What became of one submitted tool."""

    name: str
    version: int
    changed: bool


@dataclass(frozen=True)
class UpsertReport:
    """The outcome of one import."""

    tools: tuple[Upserted, ...]
    catalog_version: int
    embedded: int


def _needs_version(stored: Stored | None, draft: ToolDraft) -> bool:
    return stored is None or stored.tool.definition != draft


class Indexer:
    """Imports tool definitions and keeps every current version embedded."""

    def __init__(self, store: ToolStore, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder

    async def _vectors(self, tools: Sequence[Tool | ToolDraft]) -> dict[str, list[float]]:
        texts = [dense_text(t) for t in tools]
        vectors = await self.embedder.embed(texts, purpose="passage")
        return {t.name: v for t, v in zip(tools, vectors, strict=True)}

    async def upsert(self, drafts: Sequence[ToolDraft]) -> UpsertReport:
        """Write new versions for changed drafts; unchanged ones keep their version."""
        if not drafts:
            raise InvalidTool("no tools to import")
        if len(drafts) > MAX_TOOLS_PER_CALL:
            raise InvalidTool(f"at most {MAX_TOOLS_PER_CALL} tools per call")
        names = [d.name for d in drafts]
        if len(set(names)) != len(names):
            raise InvalidTool("a tool name appears twice in one import")
        model = self.embedder.model_id
        before = await self.store.current(names)
        stale = [
            d
            for d in drafts
            if _needs_version(before.get(d.name), d) or before[d.name].embedding_model != model
        ]
        vectors = await self._vectors(stale)
        async with self.store.writer() as writer:
            now = await writer.current(names)
            new_versions = [d for d in drafts if _needs_version(now.get(d.name), d)]
            versions = {
                d.name: (now[d.name].tool.version + 1 if d.name in now else 1) for d in new_versions
            }
            reembed = [
                now[d.name].tool
                for d in drafts
                if d.name not in versions and now[d.name].embedding_model != model
            ]
            pending: list[Tool | ToolDraft] = [*new_versions, *reembed]
            late = [t for t in pending if t.name not in vectors]
            if late:
                vectors.update(await self._vectors(late))
            if new_versions:
                rows = [(d, versions[d.name], vectors[d.name]) for d in new_versions]
                await writer.add_versions(rows, model)
            if reembed:
                await writer.set_embeddings(
                    [(t.name, t.version, vectors[t.name]) for t in reembed], model
                )
            changed = bool(new_versions or reembed)
            catalog_version = await writer.bump() if changed else await writer.version()
        report = tuple(
            Upserted(n, versions[n], True)
            if n in versions
            else Upserted(n, now[n].tool.version, False)
            for n in names
        )
        if changed:
            log.info(
                "tools imported",
                extra={"fields": {"new_versions": len(new_versions), "reembedded": len(reembed)}},
            )
        return UpsertReport(report, catalog_version, len(new_versions) + len(reembed))

    async def refresh_embeddings(self) -> int:
        """Embed current versions the configured model has not embedded; returns how many.

        Runs at start: after a model change (local <-> llmproxy) or on rows written before
        embeddings existed. Vectors of two models are never compared with each other.
        """
        model = self.embedder.model_id
        stale = await self.store.stale_embeddings(model)
        if not stale:
            return 0
        vectors = await self._vectors(stale)
        async with self.store.writer() as writer:
            await writer.set_embeddings(
                [(t.name, t.version, vectors[t.name]) for t in stale], model
            )
            await writer.bump()
        log.info("embeddings refreshed", extra={"fields": {"tools": len(stale), "model": model}})
        return len(stale)
