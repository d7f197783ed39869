"""Tool search (seed 003 section 5): BM25 + embeddings, fused, filtered, capped, cached.

The active catalog is held in memory per catalog version (it is small: thousands of
tools), with its BM25 index, its embedding matrix (from pgvector) and one eligibility
mask per filter set (see snapshot.py). The query's embedding is the one slow step, so
it is skipped when the lexical answer is settled (see ``_settled``). Results are cached
per (session, template, query hash, catalog version, request), so a session asking the
same thing again costs a lookup.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from services.common.bm25 import Mask
from services.common.errors import DatabaseError
from services.common.heap import settle_heap
from services.toolsearch.catalog import SearchFilters, Tool
from services.toolsearch.config import ToolSearchConfig
from services.toolsearch.embedder import Embedder
from services.toolsearch.errors import InvalidSearch
from services.toolsearch.ranking import select, weighted_fusion
from services.toolsearch.snapshot import CatalogSnapshot, build_snapshot
from services.toolsearch.store import ToolStore

log = logging.getLogger(__name__)
Mode = Literal["lexical", "dense", "hybrid"]
MAX_TOP_K = 100
WARM_AFTER = 0.25
"""Seconds without a catalog write before the next snapshot is built in the background."""


@dataclass(frozen=True)
class SearchRequest:
    """One search: the query, what may be returned and how many."""

    query: str
    top_k: int = 5
    filters: SearchFilters = dataclasses.field(default_factory=SearchFilters)
    required: tuple[str, ...] = ()
    """Always returned first, whatever the query (and whatever the filters but ``deny``)."""
    max_tools: int = 0
    """Hard cap on the whole result; 0: ``len(required) + top_k``."""
    session_id: str = ""
    template: str = ""
    mode: Mode = "hybrid"

    def validate(self) -> None:
        """Raise InvalidSearch for a request no search can answer."""
        if not self.query.strip():
            raise InvalidSearch("query must not be empty")
        if not 0 < self.top_k <= MAX_TOP_K:
            raise InvalidSearch(f"top_k must be between 1 and {MAX_TOP_K}")
        if not 0 <= self.max_tools <= MAX_TOP_K:
            raise InvalidSearch(f"max_tools must be between 0 and {MAX_TOP_K}")
        if self.max_tools and len(set(self.required)) > self.max_tools:
            raise InvalidSearch("more required tools than max_tools allows")
        clash = set(self.required) & self.filters.deny
        if clash:
            raise InvalidSearch(f"tools both required and denied: {sorted(clash)}")


@dataclass(frozen=True)
class Hit:
    """One returned tool with the evidence behind its place."""

    tool: Tool
    score: float
    lexical_score: float
    dense_score: float
    required: bool


@dataclass(frozen=True)
class SearchResult:
    """The tools for one request, best first (required ones on top)."""

    hits: tuple[Hit, ...]
    catalog_version: int
    cached: bool = False
    missing_required: tuple[str, ...] = ()


class SearchEngine:
    """Answers searches over the current catalog; one per toolsearch process."""

    def __init__(self, store: ToolStore, embedder: Embedder, config: ToolSearchConfig) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config
        self._snapshot: CatalogSnapshot | None = None
        self._reload = asyncio.Lock()
        self._warm_timer: asyncio.TimerHandle | None = None
        self._warming: asyncio.Task[None] | None = None
        self._cache: OrderedDict[Hashable, SearchResult] = OrderedDict()
        self.cache_hits = 0
        self.cache_misses = 0

    async def snapshot(self) -> CatalogSnapshot:
        """The in-memory catalog of the current catalog version (rebuilt when it moved)."""
        version = await self.store.catalog_version()
        current = self._snapshot
        if current is not None and current.version == version:
            return current
        async with self._reload:
            current = self._snapshot
            if current is None or current.version != version:
                held = current.entries if current is not None else {}
                version, keys, fresh = await self.store.snapshot(held)
                # Tokenising new tools and stacking the matrix: off the event loop.
                current = await asyncio.to_thread(
                    build_snapshot,
                    version,
                    self.embedder.model_id,
                    self.embedder.dimensions,
                    keys,
                    held,
                    fresh,
                )
                self._snapshot = current
                settle_heap()  # the catalog lives on: out of the collector's full passes
            return current

    def snapshot_held(self) -> CatalogSnapshot | None:
        """The snapshot in memory now, without asking whether the catalog moved."""
        return self._snapshot

    def warm(self) -> None:
        """Build the next catalog version's snapshot in the background once writes pause
        (a bulk import is many calls in a row), so the next search finds it ready."""
        if self._warm_timer is not None:
            self._warm_timer.cancel()
        self._warm_timer = asyncio.get_running_loop().call_later(WARM_AFTER, self._start_warm)

    def _start_warm(self) -> None:
        if self._warming is None or self._warming.done():
            self._warming = asyncio.create_task(self._warm())

    async def _warm(self) -> None:
        try:
            await self.snapshot()
        except DatabaseError as error:
            # The next search rebuilds it and reports the error to its caller.
            log.warning("catalog snapshot not built", extra={"fields": {"error": str(error)}})

    async def close(self) -> None:
        """Stop a background build (at server stop)."""
        if self._warm_timer is not None:
            self._warm_timer.cancel()
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)

    def _cache_key(self, request: SearchRequest, version: int) -> Hashable:
        digest = hashlib.sha256(request.query.encode()).hexdigest()
        # Everything else that shapes the answer is part of the key too.
        shape = dataclasses.replace(request, query="", session_id="", template="")
        return (request.session_id, request.template, digest, version, shape)

    def _cached(self, key: Hashable) -> SearchResult | None:
        found = self._cache.get(key)
        if found is None:
            self.cache_misses += 1
            return None
        self.cache_hits += 1
        self._cache.move_to_end(key)
        return dataclasses.replace(found, cached=True)

    def _remember(self, key: Hashable, result: SearchResult) -> None:
        if self.config.cache_size <= 0:
            return
        self._cache[key] = result
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)

    def _lexical(
        self, request: SearchRequest, snap: CatalogSnapshot, eligible: Mask
    ) -> list[tuple[str, float]]:
        if request.mode not in ("lexical", "hybrid"):
            return []
        top = snap.index.top(request.query, self.config.candidates, eligible)
        return [(snap.tools[i].name, score) for i, score in top]

    async def _dense(
        self, request: SearchRequest, snap: CatalogSnapshot, eligible: Mask
    ) -> list[tuple[str, float]]:
        if request.mode not in ("dense", "hybrid") or not eligible.any():
            return []
        # Spacing carries no meaning for the model: one memo entry per wording.
        query = " ".join(request.query.split())
        [vector] = await self.embedder.embed([query], purpose="query")
        top = snap.dense_top(vector, self.config.candidates, eligible)
        return [(snap.tools[i].name, score) for i, score in top]

    def _settled(self, request: SearchRequest, snap: CatalogSnapshot) -> bool:
        """True when a hybrid search may skip the query embedding: every word of the query
        is a catalog word. The model is there for words the catalog does not use (other
        languages, synonyms); on Seal-Tools, skipping it for such queries changed no
        ranking metric (docs/decisions.md). TOOLSEARCH_DENSE_ALWAYS turns this off."""
        if request.mode != "hybrid" or self.config.dense_always:
            return False
        return snap.index.knows_every_word(request.query)

    async def search(self, request: SearchRequest) -> SearchResult:
        """Retrieve, fuse, filter and cap; see SearchRequest for the rules."""
        request.validate()
        snap = await self.snapshot()
        key = self._cache_key(request, snap.version)
        cached = self._cached(key)
        if cached is not None:
            return cached
        eligible = snap.eligible(request.filters)
        lexical = self._lexical(request, snap, eligible)
        settled = self._settled(request, snap)
        dense = [] if settled else await self._dense(request, snap, eligible)
        if request.mode == "hybrid":
            ranked = weighted_fusion(lexical, dense, self.config.lexical_weight)
        else:
            ranked = lexical or dense
        required = [n for n in dict.fromkeys(request.required) if n in snap.by_name]
        missing = tuple(n for n in dict.fromkeys(request.required) if n not in snap.by_name)
        picks = select(ranked, required=required, top_k=request.top_k, max_tools=request.max_tools)
        lexical_scores, dense_scores = dict(lexical), dict(dense)
        hits = tuple(
            Hit(
                tool=snap.tools[snap.by_name[p.name]],
                score=p.score,
                lexical_score=lexical_scores.get(p.name, 0.0),
                dense_score=dense_scores.get(p.name, 0.0),
                required=p.required,
            )
            for p in picks
        )
        result = SearchResult(hits, snap.version, missing_required=missing)
        self._remember(key, result)
        return result
