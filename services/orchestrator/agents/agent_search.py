"""Agent directory search (seed 003 section 7.1): which template suits a request.

Lexical, and honest about it: Okapi BM25 over the few served templates, built per
query (a handful of documents index in microseconds, so there is no index to keep in
sync with admin changes). Fields are weighted by repeating their terms: the name, tags
and capability text say what an agent is for, the system prompt mostly how it behaves.
A query sharing no word with any template scores nothing here; ``AgentDirectory``
asks toolsearch's hybrid directory first (BM25 and embeddings) and falls back to this.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from services.common.errors import ServiceError
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate

log = logging.getLogger(__name__)
# (query, [(name, capability text)], top_k) -> [(name, score)], best first
Directory = Callable[[str, Sequence[tuple[str, str]], int], Awaitable[list[tuple[str, float]]]]

_WORD = re.compile(r"[^\W_]+")
# Words that appear in nearly every prompt ("you", "agent") would only add noise.
STOPWORDS = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "how"),
        *("i", "in", "is", "it", "me", "my", "of", "on", "or", "please", "the", "this", "to"),
        *("what", "with", "you", "your", "agent", "agents"),
    }
)
# (weight, field): the weight is how many times the field's terms count.
FIELD_WEIGHTS = (3, "name"), (3, "tags"), (2, "description"), (2, "capabilities"), (1, "prompt")
K1, B = 1.2, 0.75


def _stem(word: str) -> str:
    # Plural folding only ("errors" finds "error"); a real stemmer mangles identifiers.
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased words, stop words dropped, plurals folded."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def _fields(template: AgentTemplate) -> dict[str, str]:
    meta = template.multiagent_meta
    return {
        "name": f"{template.name} {template.display_name}",
        "tags": " ".join(str(t) for t in meta.get("tags", ())),
        "description": template.description,
        "capabilities": str(meta.get("capabilities", "")),
        "prompt": template.system_prompt,
    }


def capability_text(template: AgentTemplate) -> str:
    """What the agent directory indexes for a template."""
    return "\n".join(v for v in _fields(template).values() if v)


def document(template: AgentTemplate) -> Counter[str]:
    """The template's weighted term frequencies."""
    fields = _fields(template)
    counts: Counter[str] = Counter()
    for weight, name in FIELD_WEIGHTS:
        for term in tokenize(fields[name]):
            counts[term] += weight
    return counts


@dataclass(frozen=True)
class AgentHit:
    """A template and how well it matches the query."""

    template: AgentTemplate
    score: float
    matched: tuple[str, ...]
    """The query terms the template contains."""


def search_agents(query: str, templates: Sequence[AgentTemplate], top_k: int = 5) -> list[AgentHit]:
    """The ``top_k`` best-scoring templates (score > 0), best first; ties by name."""
    terms = set(tokenize(query))
    docs = [(t, document(t)) for t in templates]
    if not terms or not docs:
        return []
    average = sum(sum(d.values()) for _, d in docs) / len(docs)
    hits: list[AgentHit] = []
    for template, counts in docs:
        length_norm = 1 - B + B * sum(counts.values()) / average
        score, matched = 0.0, []
        for term in sorted(terms):
            frequency = counts.get(term, 0)
            if not frequency:
                continue
            having = sum(1 for _, d in docs if term in d)
            idf = math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))
            score += idf * frequency * (K1 + 1) / (frequency + K1 * length_norm)
            matched.append(term)
        if score > 0:
            hits.append(AgentHit(template, round(score, 6), tuple(matched)))
    hits.sort(key=lambda h: (-h.score, h.template.name))
    return hits[:top_k]


class AgentDirectory:
    """The served templates ranked for a request (seed 003 section 7.1), for admins,
    for routing and for agents (the ``agent_search`` tool)."""

    def __init__(self, registry: AgentRegistry, directory: Directory | None = None) -> None:
        self.registry = registry
        self.directory = directory

    async def ranked(
        self, query: str, top_k: int, candidates: Sequence[AgentTemplate] | None = None
    ) -> list[AgentHit]:
        """toolsearch's hybrid directory ranks ``candidates`` (default: every served
        template); local BM25 (and its matched terms) stands in when toolsearch cannot
        be asked."""
        templates = list(self.registry.all() if candidates is None else candidates)
        if not templates:
            return []
        local = search_agents(query, templates, len(templates))
        if self.directory is None:
            return local[:top_k]
        try:
            ranked = await self.directory(
                query, [(t.name, capability_text(t)) for t in templates], top_k
            )
        except ServiceError as error:
            log.warning("agent directory unavailable", extra={"fields": {"err": error.message}})
            return local[:top_k]
        matched = {hit.template.name: hit.matched for hit in local}
        by_name = {t.name: t for t in templates}
        return [
            AgentHit(by_name[name], score, matched.get(name, ()))
            for name, score in ranked
            if name in by_name
        ]
