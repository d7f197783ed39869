"""Okapi BM25 in memory, scored with numpy, and its one tokenizer.

toolsearch indexes the tool catalog with it (one index per catalog version) and ranks
the agent directory's candidates; the orchestrator ranks the same candidates with the
same code when toolsearch cannot be asked (``lexical_matches``).

Chosen over Postgres full text after measuring both on Seal-Tools (docs/decisions.md):
``ts_rank``/``ts_rank_cd`` over an OR of the query's lexemes reached nDCG@10 0.85-0.91 on the
800-tool slice, this index 0.97; websearch_to_tsquery (AND of all words) finds almost
nothing for a sentence-long request. Each posting list holds its documents and their
precomputed term weights as arrays, so a query costs one vector addition per query term
instead of a Python loop over postings.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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

# Agents' capability texts: a word in nearly every agent's prompt ("you are an agent
# that...") says nothing about the agent, and would make every template "match".
AGENT_STOPWORDS = STOPWORDS | {"agent", "agents"}

Mask = npt.NDArray[np.bool_]
"""One flag per document position."""


def _stem(word: str) -> str:
    # Plural folding only: "files" finds "file". Heavier English stemming cost recall on
    # Seal-Tools identifiers and would mangle non-English words.
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def tokenize(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Lower-cased word tokens with camelCase split, stop words dropped, plurals folded.

    The one tokenizer of every BM25 here: the tool catalog and the agent directory (which
    passes its own, longer stop list)."""
    words = _WORD.findall(_CAMEL.sub(r"\1 \2", text).lower())
    return [_stem(w) for w in words if w not in stopwords]


def term_counts(text: str, stopwords: frozenset[str] = STOPWORDS) -> Counter[str]:
    """What the index keeps of one document: how often each token occurs."""
    return Counter(tokenize(text, stopwords))


def top_positions(
    scores: npt.NDArray[np.float64], limit: int, admitted: Mask
) -> list[tuple[int, float]]:
    """The best ``limit`` admitted positions as (position, score), best first; ties go to
    the lower position (positions are in name order, so ties are broken by name)."""
    found = np.flatnonzero(admitted)
    if len(found) > limit:
        # Everything scoring at least the limit-th best survives, ties included.
        cut = np.partition(scores[found], len(found) - limit)[len(found) - limit]
        found = found[scores[found] >= cut]
    order = np.lexsort((found, -scores[found]))[:limit]
    return [(int(found[i]), float(scores[found[i]])) for i in order]


class Bm25Index:
    """BM25 (Lucene's idf, k1=1.5, b=0.75) over documents identified by position."""

    def __init__(
        self,
        documents: Sequence[Mapping[str, int]],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: frozenset[str] = STOPWORDS,
    ) -> None:
        """Index term counts (see ``term_counts``), one mapping per document; queries are
        tokenized with the documents' ``stopwords``."""
        self.k1 = k1
        self.b = b
        self.stopwords = stopwords
        self.size = len(documents)
        lengths = np.fromiter((sum(c.values()) for c in documents), float, self.size)
        average = float(lengths.mean()) if self.size else 0.0
        norms = k1 * (1 - b + b * lengths / average) if average else np.full(self.size, k1)
        self._vocabulary: dict[str, int] = {}
        term_ids: list[int] = []
        at: list[int] = []
        tf: list[int] = []
        for position, counter in enumerate(documents):
            for term, frequency in counter.items():
                term_ids.append(self._vocabulary.setdefault(term, len(self._vocabulary)))
                at.append(position)
                tf.append(frequency)
        terms = np.array(term_ids, dtype=np.int64)
        positions = np.array(at, dtype=np.int64)
        frequencies = np.array(tf, dtype=np.float64)
        document_frequency = np.bincount(terms, minlength=len(self._vocabulary))
        idf = np.log(1 + (self.size - document_frequency + 0.5) / (document_frequency + 0.5))
        weights = idf[terms] * frequencies * (k1 + 1) / (frequencies + norms[positions])
        # Postings of term t: positions[offsets[t]:offsets[t + 1]], with their weights
        # (idf * tf * (k1 + 1) / (tf + k1 * norm): the term's whole contribution).
        order = np.argsort(terms, kind="stable")
        self._positions = positions[order]
        self._weights = weights[order]
        self._offsets = np.concatenate(([0], np.cumsum(document_frequency)))

    @classmethod
    def of_texts(
        cls,
        texts: Sequence[str],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: frozenset[str] = STOPWORDS,
    ) -> Bm25Index:
        """Index raw texts."""
        counts = [term_counts(t, stopwords) for t in texts]
        return cls(counts, k1=k1, b=b, stopwords=stopwords)

    def terms(self, query: str) -> set[str]:
        """The distinct tokens of ``query``, as this index reads it."""
        return set(tokenize(query, self.stopwords))

    def knows_every_word(self, query: str) -> bool:
        """True when each token of ``query`` occurs in some document (and there is one)."""
        terms = self.terms(query)
        return bool(terms) and all(term in self._vocabulary for term in terms)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """One score per document; 0 for those sharing no term with ``query``."""
        found = np.zeros(self.size)
        for term in self.terms(query):
            term_id = self._vocabulary.get(term)
            if term_id is not None:
                start, end = self._offsets[term_id], self._offsets[term_id + 1]
                # Positions are unique within a posting, so fancy-index addition is exact.
                found[self._positions[start:end]] += self._weights[start:end]
        return found

    def top(self, query: str, limit: int, eligible: Mask | None = None) -> list[tuple[int, float]]:
        """The best ``limit`` (position, score) pairs, optionally among ``eligible`` only."""
        scores = self.scores(query)
        admitted = scores > 0
        return top_positions(scores, limit, admitted if eligible is None else admitted & eligible)


@dataclass(frozen=True)
class LexicalMatch:
    """An entry's BM25 score for a query and the query terms behind it."""

    score: float
    matched: tuple[str, ...]
    """The query terms the entry's text contains, sorted."""


def lexical_matches(
    query: str, entries: Sequence[tuple[str, str]], stopwords: frozenset[str] = AGENT_STOPWORDS
) -> dict[str, LexicalMatch]:
    """BM25 over ``(name, text)`` entries, indexed per call (a handful of agents index in
    microseconds): each entry sharing a term with ``query``."""
    counts = [term_counts(text, stopwords) for _, text in entries]
    index = Bm25Index(counts, stopwords=stopwords)
    terms = index.terms(query)
    return {
        name: LexicalMatch(float(score), tuple(sorted(terms.intersection(terms_of))))
        for (name, _), terms_of, score in zip(entries, counts, index.scores(query), strict=True)
        if score > 0
    }
