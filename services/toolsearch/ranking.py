"""Pure ranking: score fusion, the final selection (required tools, cap) and IR metrics.

Nothing here touches a database or a model, so every rule is unit-tested on hand-made
rankings. Ties are broken by name so that equal inputs always give equal outputs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

Ranked = Sequence[tuple[str, float]]
"""(name, score) pairs, best first."""

RRF_K = 60


def _ordered(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def min_max(ranked: Ranked) -> dict[str, float]:
    """Scores mapped onto 0..1 within the list; a list of equal scores maps to 1."""
    if not ranked:
        return {}
    values = [score for _, score in ranked]
    low, high = min(values), max(values)
    if high == low:
        return {name: 1.0 for name, _ in ranked}
    return {name: (score - low) / (high - low) for name, score in ranked}


def weighted_fusion(
    lexical: Ranked, dense: Ranked, lexical_weight: float
) -> list[tuple[str, float]]:
    """``w * minmax(lexical) + (1 - w) * minmax(dense)``; absent from a list counts as 0.

    BM25 scores have no fixed range and cosines crowd into a narrow band, so each list is
    normalised on its own before mixing. On Seal-Tools this beat reciprocal rank fusion,
    which let the much weaker dense list drag the lexical ranking down (docs/decisions.md).
    """
    if not 0.0 <= lexical_weight <= 1.0:
        raise ValueError("lexical_weight must be within 0..1")
    lex, den = min_max(lexical), min_max(dense)
    fused = {
        name: lexical_weight * lex.get(name, 0.0) + (1 - lexical_weight) * den.get(name, 0.0)
        for name in lex.keys() | den.keys()
    }
    return _ordered(fused)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], *, k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Cormack et al.'s RRF: ``sum(w / (k + rank))`` with ranks starting at 1."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    fused: dict[str, float] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[index]
        for rank, name in enumerate(ranking, start=1):
            fused[name] = fused.get(name, 0.0) + weight / (k + rank)
    return _ordered(fused)


@dataclass(frozen=True)
class Pick:
    """One tool of a search result."""

    name: str
    score: float
    required: bool = False


def select(
    ranked: Ranked, *, required: Sequence[str], top_k: int, max_tools: int = 0
) -> list[Pick]:
    """Required tools first (request order), then up to ``top_k`` retrieved ones, all cut
    to ``max_tools`` when it is set. A required tool keeps its retrieval score if it had one.

    The caller guarantees ``len(required) <= max_tools`` when a cap is set, so the cap
    never drops a required tool.
    """
    scores = dict(ranked)
    seen: set[str] = set()
    picks: list[Pick] = []
    for name in required:
        if name not in seen:
            seen.add(name)
            picks.append(Pick(name, scores.get(name, 0.0), required=True))
    retrieved = 0
    for name, score in ranked:
        if retrieved >= top_k:
            break
        if name not in seen:
            seen.add(name)
            picks.append(Pick(name, score))
            retrieved += 1
    return picks[:max_tools] if max_tools > 0 else picks


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant items found in the first ``k``."""
    if not relevant:
        raise ValueError("recall needs at least one relevant item")
    return len(set(ranked[:k]) & set(relevant)) / len(set(relevant))


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Binary-relevance nDCG: DCG of the first ``k`` over the DCG of a perfect ranking."""
    wanted = set(relevant)
    if not wanted:
        raise ValueError("nDCG needs at least one relevant item")
    gain = sum(1 / math.log2(i + 2) for i, name in enumerate(ranked[:k]) if name in wanted)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), k)))
    return gain / ideal


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)
