"""The agent directory: candidate agents ranked by the same hybrid retrieval as tools.

The ranking of agents (for admins, for routing and for the ``agent_search`` tool); its
lexical half is ``common/bm25.lexical_matches``, which the orchestrator uses alone when
toolsearch cannot be asked. The orchestrator owns the templates and sends the
candidates' capability texts with each query (a handful of templates, so there is
nothing to keep in sync here); their embeddings are memoised per text, i.e. computed
once per template version. Each hit names the query terms its text contains: routing
trusts a hit on words, not on meaning alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.bm25 import LexicalMatch, lexical_matches
from services.toolsearch.embedder import Embedder
from services.toolsearch.errors import InvalidSearch
from services.toolsearch.ranking import weighted_fusion

MAX_ENTRIES = 500


@dataclass(frozen=True)
class DirectoryHit:
    """An agent and its scores."""

    name: str
    score: float
    lexical: float
    dense: float
    matched: tuple[str, ...] = ()
    """The query terms the entry's text contains, sorted."""


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


async def search_directory(
    query: str,
    entries: Sequence[tuple[str, str]],
    top_k: int,
    embedder: Embedder,
    lexical_weight: float,
) -> list[DirectoryHit]:
    """Rank ``(name, text)`` entries for ``query``: BM25 and e5 cosine, fused."""
    if not query.strip():
        raise InvalidSearch("query must not be empty")
    if not entries or len(entries) > MAX_ENTRIES:
        raise InvalidSearch(f"give 1 to {MAX_ENTRIES} directory entries")
    names = [name for name, _ in entries]
    words = lexical_matches(query, entries)
    vectors = await embedder.embed([t for _, t in entries])
    (probe,) = await embedder.embed([query], purpose="query")
    dense = {name: cosine(probe, vector) for name, vector in zip(names, vectors, strict=True)}
    fused = weighted_fusion(
        sorted(((name, m.score) for name, m in words.items()), key=lambda kv: -kv[1]),
        sorted(dense.items(), key=lambda kv: -kv[1]),
        lexical_weight,
    )
    no_words = LexicalMatch(0.0, ())
    hits = []
    for name, score in fused[:top_k]:
        found = words.get(name, no_words)
        hits.append(DirectoryHit(name, score, found.score, dense[name], found.matched))
    return hits
