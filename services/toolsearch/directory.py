"""The agent directory: candidate agents ranked by the same hybrid retrieval as tools.

The orchestrator owns the templates and sends the candidates' capability texts with each
query (a handful of templates, so there is nothing to keep in sync here); their
embeddings are memoised per text, i.e. computed once per template version.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.toolsearch.bm25 import Bm25Index
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
    scores = Bm25Index.of_texts([t for _, t in entries]).scores(query)
    lexical = {name: float(s) for name, s in zip(names, scores, strict=True) if s > 0}
    vectors = await embedder.embed([t for _, t in entries])
    (probe,) = await embedder.embed([query], purpose="query")
    dense = {name: cosine(probe, vector) for name, vector in zip(names, vectors, strict=True)}
    fused = weighted_fusion(
        sorted(lexical.items(), key=lambda kv: -kv[1]),
        sorted(dense.items(), key=lambda kv: -kv[1]),
        lexical_weight,
    )
    return [
        DirectoryHit(name, score, lexical.get(name, 0.0), dense[name])
        for name, score in fused[:top_k]
    ]
