"""The orchestrator's side of toolsearch's agent directory: plain Python over its stub.

toolsearch ranks (BM25 and embeddings fused, ``services/toolsearch/directory.py``); this
module sends the candidates' capability texts and maps the hits back to templates. The
same directory serves admins (``SearchAgents``), routing beyond the six specialists and
the ``agent_search`` tool. When toolsearch cannot be asked (or a loop has no peers), the
directory's lexical half ranks here, the same code on the same texts, and says so in
the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from codelab.v1 import toolsearch_pb2, toolsearch_pb2_grpc
from services.common.bm25 import lexical_matches
from services.common.errors import ServiceError
from services.orchestrator.agents.template_vectors import Embed
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.peers.mesh_clients import call

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ranked:
    """One hit of toolsearch's directory."""

    name: str
    score: float
    matched: tuple[str, ...]


# (query, [(name, capability text)], top_k) -> hits, best first
Directory = Callable[[str, Sequence[tuple[str, str]], int], Awaitable[list[Ranked]]]


@dataclass(frozen=True)
class AgentHit:
    """A template and how well it matches the query."""

    template: AgentTemplate
    score: float
    matched: tuple[str, ...]
    """The query terms the template's capability text contains."""


class AgentDirectory:
    """The served templates ranked for a request (seed 003 section 7.1), for admins,
    for routing and for agents (the ``agent_search`` tool)."""

    def __init__(self, registry: AgentRegistry, directory: Directory | None = None) -> None:
        self.registry = registry
        self.directory = directory
        """toolsearch's directory; None (a loop without peers) ranks lexically here."""

    async def ranked(
        self, query: str, top_k: int, candidates: Sequence[AgentTemplate] | None = None
    ) -> list[AgentHit]:
        """toolsearch ranks ``candidates`` (default: every served template) for ``query``;
        its lexical half alone when toolsearch cannot be asked."""
        templates = list(self.registry.all() if candidates is None else candidates)
        if not templates or not query.strip():
            return []
        entries = [(t.name, t.capability_text()) for t in templates]
        try:
            if self.directory is None:
                ranked = lexically(query, entries, top_k)
            else:
                ranked = await self.directory(query, entries, top_k)
        except ServiceError as error:
            log.warning("agent directory unavailable", extra={"fields": {"err": error.message}})
            ranked = lexically(query, entries, top_k)
        by_name = {t.name: t for t in templates}
        return [
            AgentHit(by_name[hit.name], hit.score, hit.matched)
            for hit in ranked
            if hit.name in by_name
        ]


def lexically(query: str, entries: Sequence[tuple[str, str]], top_k: int) -> list[Ranked]:
    """The directory's lexical half: entries sharing a word with ``query``, best first
    (ties by name)."""
    found = lexical_matches(query, entries)
    ranked = [Ranked(name, match.score, match.matched) for name, match in found.items()]
    ranked.sort(key=lambda hit: (-hit.score, hit.name))
    return ranked[:top_k]


def directory_searcher(stub: toolsearch_pb2_grpc.ToolSearchAsyncStub) -> Directory:
    """The agent directory of toolsearch: (name, capability text) candidates, ranked."""

    async def search(query: str, entries: Sequence[tuple[str, str]], top_k: int) -> list[Ranked]:
        request = toolsearch_pb2.DirectorySearchRequest(
            query=query,
            top_k=top_k,
            entries=[toolsearch_pb2.DirectoryEntry(name=n, text=t) for n, t in entries],
        )
        reply = await call(lambda: stub.SearchDirectory(request))
        return [Ranked(hit.name, hit.score, tuple(hit.matched_terms)) for hit in reply.hits]

    return search


def directory_embedder(stub: toolsearch_pb2_grpc.ToolSearchAsyncStub) -> Embed:
    """The agent directory's vectors of (key, capability text) entries."""

    async def embed(entries: Sequence[tuple[str, str]]) -> list[tuple[str, list[float]]]:
        request = toolsearch_pb2.EmbedDirectoryRequest(
            entries=[toolsearch_pb2.DirectoryEntry(name=n, text=t) for n, t in entries]
        )
        reply = await call(lambda: stub.EmbedDirectory(request))
        return [(v.name, list(v.vector)) for v in reply.vectors]

    return embed
