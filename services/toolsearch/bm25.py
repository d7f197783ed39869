"""Okapi BM25 over the catalog, in memory: one index per catalog version.

Chosen over Postgres full text after measuring both on Seal-Tools (docs/decisions.md):
``ts_rank``/``ts_rank_cd`` over an OR of the query's lexemes reached nDCG@10 0.85-0.91 on the
800-tool slice, this index 0.97; websearch_to_tsquery (AND of all words) finds almost
nothing for a sentence-long request. A catalog of thousands of tools indexes in
milliseconds, so rebuilding on each catalog version is cheaper than keeping one in sync.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
# Letters and digits of any script: Russian words become tokens too (and simply match
# nothing in an English catalog, leaving the query to the dense retriever).
_WORD = re.compile(r"[^\W_]+")
STOPWORDS = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from"),
        *("has", "have", "how", "i", "in", "is", "it", "its", "me", "my", "need", "of", "on"),
        *("or", "please", "the", "this", "that", "to", "was", "what", "when", "where", "which"),
        *("who", "will", "with", "want", "you", "your"),
    }
)


def _stem(word: str) -> str:
    # Plural folding only: "files" finds "file". Heavier English stemming cost recall on
    # Seal-Tools identifiers and would mangle non-English words.
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens with camelCase split, stop words dropped, plurals folded."""
    words = _WORD.findall(_CAMEL.sub(r"\1 \2", text).lower())
    return [_stem(w) for w in words if w not in STOPWORDS]


class Bm25Index:
    """BM25 (Lucene's idf, k1=1.5, b=0.75) over documents identified by position."""

    def __init__(self, documents: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        counts = [Counter(tokenize(doc)) for doc in documents]
        self.size = len(counts)
        self._lengths = [sum(c.values()) for c in counts]
        self._average = (sum(self._lengths) / self.size) if self.size else 0.0
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for position, counter in enumerate(counts):
            for term, frequency in counter.items():
                self._postings[term].append((position, frequency))
        self._idf = {
            term: math.log(1 + (self.size - len(posting) + 0.5) / (len(posting) + 0.5))
            for term, posting in self._postings.items()
        }

    def scores(self, query: str) -> dict[int, float]:
        """Positive scores of the documents sharing a term with ``query``."""
        found: dict[int, float] = defaultdict(float)
        for term in set(tokenize(query)):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for position, frequency in self._postings[term]:
                norm = 1 - self.b + self.b * self._lengths[position] / self._average
                found[position] += idf * frequency * (self.k1 + 1) / (frequency + self.k1 * norm)
        return dict(found)

    def top(
        self, query: str, limit: int, eligible: set[int] | None = None
    ) -> list[tuple[int, float]]:
        """The best ``limit`` (position, score) pairs, optionally among ``eligible`` only."""
        scored = list(self.scores(query).items())
        if eligible is not None:
            scored = [(p, s) for p, s in scored if p in eligible]
        return sorted(scored, key=lambda item: (-item[1], item[0]))[:limit]
