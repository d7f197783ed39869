"""Choosing the specialist for a user request (pure functions).

Two levels, as the spec describes: the model classifies the request (``classification_prompt``
then ``parse_classification``); when the model is unavailable or its answer is unusable,
``keyword_classification`` decides from English and Russian keywords.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "SPECIALISTS",
    "Classification",
    "Confidence",
    "classification_prompt",
    "keyword_classification",
    "parse_classification",
]

SPECIALISTS = ("coder", "architect", "debug", "ask")
Confidence = Literal["high", "medium", "low"]
Method = Literal["llm", "salvaged", "keywords", "directory"]
_CONFIDENCES: tuple[Confidence, ...] = ("high", "medium", "low")
# Bounds the scan for an embedded object: a runaway answer must not cost quadratic time.
_MAX_SCAN_CHARS = 20_000
_MAX_OBJECT_STARTS = 50


@dataclass(frozen=True)
class Classification:
    """Which specialist should take the request, how sure the router is, and why.

    ``method`` records how the decision was reached: the model's JSON (``llm``), a regex
    over a malformed answer (``salvaged``), the keyword fallback (``keywords``) or, when
    no keyword matched, an admin's template the agent directory found (``directory``).
    """

    agent: str
    confidence: Confidence
    reason: str
    method: Method


def classification_prompt(user_message: str, extra: Sequence[tuple[str, str]] = ()) -> str:
    """The routing prompt of the spec, asking the model for a JSON verdict; ``extra``:
    (name, description) of further templates the agent directory ranked for the request."""
    more = "".join(f"- {name}: {description}\n" for name, description in extra)
    return (
        "Analyze the following user request and determine which specialized agent should "
        "handle it.\n\n"
        "Available agents:\n"
        "- coder: For writing, modifying, or refactoring code\n"
        "- architect: For planning, designing, or creating technical specifications\n"
        "- debug: For troubleshooting, investigating errors, or analyzing logs\n"
        "- ask: For answering questions or explaining concepts\n"
        f"{more}\n"
        f"User request: {user_message}\n\n"
        'Respond with JSON: {"agent": "agent_name", "confidence": "high|medium|low", '
        '"reason": "explanation"}'
    )


def _agent_name(value: object, allowed: Collection[str]) -> str | None:
    if not isinstance(value, str):
        return None
    name = value.strip().lower()
    # Models like to answer "Coder Agent" or "coder_agent" for "coder".
    name = re.sub(r"[\s_-]*agent$", "", name) or name
    return name if name in {a.lower() for a in allowed} else None


def _confidence(value: object) -> Confidence:
    text = value.strip().lower() if isinstance(value, str) else ""
    return next((c for c in _CONFIDENCES if c == text), "medium")


def _first_object(text: str) -> dict[str, Any] | None:
    """The whole text as a JSON object, else the first object embedded in it (fences, prose)."""
    text = text[:_MAX_SCAN_CHARS]
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return whole
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"\{", text)][:_MAX_OBJECT_STARTS]:
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_classification(text: str, allowed: Collection[str]) -> Classification | None:
    """Read the model's routing answer; ``None`` when nothing usable is in it.

    A well-formed object whose agent is not in ``allowed`` yields ``None`` rather than a
    salvage: the model did answer, and guessing from its prose would override it.
    """
    found = _first_object(text)
    if found is not None and "agent" in found:
        agent = _agent_name(found["agent"], allowed)
        if agent is None:
            return None
        reason = found.get("reason")
        reason_text = reason if isinstance(reason, str) else ""
        return Classification(agent, _confidence(found.get("confidence")), reason_text, "llm")

    quoted = re.search(r'"agent"\s*:\s*"(\w+)"', text, re.IGNORECASE)
    if quoted:
        agent = _agent_name(quoted.group(1), allowed)
        if agent is not None:
            said = re.search(r'"confidence"\s*:\s*"(\w+)"', text, re.IGNORECASE)
            confidence = _confidence(said.group(1) if said else None)
            return Classification(agent, confidence, "salvaged from a malformed answer", "salvaged")
    names = {
        word.lower()
        for word in re.findall(r"\b\w+\b", text)
        if word.lower() in {a.lower() for a in allowed}
    }
    if len(names) == 1:
        return Classification(names.pop(), "low", "agent named in a free-text answer", "salvaged")
    return None


# --- keyword fallback ----------------------------------------------------------------------

# (weight, pattern). English patterns are whole words with their inflections spelled out, so
# "add" misses "address" and "plan" misses "planet". Russian inflects too much for that: its
# patterns are stems anchored at a word start ("созда" covers создай/создать/создайте).
# Strong words (2) name the task; weak ones (1) only name its topic.
_Table = tuple[tuple[int, str], ...]
_ENGLISH: dict[str, _Table] = {
    "coder": (
        (2, r"writ(?:e|es|ing|ten)|wrote|rewrit(?:e|es|ing|ten)"),
        (2, r"creat(?:e|es|ed|ing)|implement(?:s|ed|ing|ation)?|generat(?:e|es|ed|ing)"),
        (2, r"fix(?:es|ed|ing)?|modif(?:y|ies|ied|ying)|refactor(?:s|ed|ing)?"),
        (2, r"add(?:s|ed|ing)?|updat(?:e|es|ed|ing)|chang(?:e|es|ed|ing)"),
        (2, r"renam(?:e|es|ed|ing)|(?:delet|remov)(?:e|es|ed|ing)"),
        (1, r"code|functions?|class(?:es)?|methods?|scripts?"),
    ),
    "architect": (
        (2, r"design(?:s|ed|ing)?|architect(?:s|ure|ures|ural)?|blueprints?|roadmaps?"),
        (2, r"specifications?|specs?|diagrams?|plan(?:s|ned|ning)?"),
        (2, r"document(?:s|ed|ing|ation)?"),
        (1, r"structur(?:e|es|ed|ing)|schemas?|microservices?|components?"),
    ),
    "debug": (
        (2, r"debug(?:s|ged|ging)?|\w*errors?|bugs?|buggy|exceptions?|traceback|stack\s?trace"),
        (2, r"crash(?:es|ed|ing)?|fail(?:s|ed|ing|ure|ures)?|broken|segfault|hangs?"),
        (2, r"troubleshoot(?:s|ed|ing)?|investigat(?:e|es|ed|ing)"),
        (2, r"not\s+working|(?:doesn'?t|does\s+not|won'?t)\s+work"),
        (1, r"issues?|problems?|analy[sz](?:e|es|ed|ing|is)|logs?|warnings?|diagnos\w*"),
    ),
    "ask": (
        (2, r"explain(?:s|ed|ing)?|explanation|describ(?:e|es|ing)|tell\s+me|clarify"),
        (2, r"difference|(?:what|how)\s+(?:is|are|does|do)|questions?"),
        (1, r"what|how|why|where|which|who"),
    ),
}
_RUSSIAN: dict[str, _Table] = {
    "coder": (
        (2, r"созда|напиш|написа|перепиш|переписа|реализ|добав|исправ|рефактор"),
        (2, r"сгенер|генерир|сдела|переимен|удал(?:и|ить|ите)\b"),
        # Verbs only: the nouns (обновление, изменения) usually describe what broke things.
        (2, r"(?:обнов|измен)(?:и|ить|ите)\b|изменя(?:й|йте|ть)\b|обновля(?:й|йте|ть)\b"),
        (1, r"код(?:а|е|у|ом|ы)?\b|функци|класс|метод|скрипт"),
    ),
    "architect": (
        (2, r"архитектур|спроектир|проектир|спецификац|диаграмм|спланир|документ|дизайн"),
        (2, r"план(?:а|ы|у|ом|е|ов|ир\w*)?\b|тз\b|техническ\w*\s+задани"),
        (1, r"структур|схем|микросервис|компонент|масштабир"),
    ),
    "debug": (
        (2, r"ошиб|баг(?:а|и|у|ом|ов|е|ами)?\b|отлад|дебаг|исключени|трейсб|стектрейс"),
        (2, r"пада|упал|слома|вылет|краш|завис(?:а\w*|ло|ла|ли)?\b|утечк|не\s+работа"),
        (2, r"неправильн|некорректн"),
        (1, r"проблем|лог(?:и|ов|ах|ам|е|а)?\b|диагност|исследова|исследу|(?:про)?анализ"),
    ),
    "ask": (
        (2, r"объясн|поясн|расскаж|опиш|отлича|разниц|подскаж|вопрос|понима"),
        (2, r"что\s+(?:такое|делает|значит)|как\s+работа"),
        (1, r"что\b|как(?:ой|ая|ое|ие|ого|ую|им|их)?\b|почему|зачем|где\b"),
    ),
}


def _compile(weight: int, pattern: str, english: bool) -> tuple[int, re.Pattern[str]]:
    tail = r"\b" if english else ""
    return weight, re.compile(rf"\b(?:{pattern}){tail}", re.IGNORECASE)


_KEYWORDS: dict[str, list[tuple[int, re.Pattern[str]]]] = {
    agent: [_compile(w, p, True) for w, p in _ENGLISH[agent]]
    + [_compile(w, p, False) for w, p in _RUSSIAN[agent]]
    for agent in SPECIALISTS
}
# Ties go to the more capable agent, so a misroute still leaves the work doable: the coder
# has every tool ("fix the bug" is a fix, and the coder's prompt covers bug fixes), the
# architect can write documents, debug can run commands, ask only reads.
_TIE_ORDER = ("coder", "architect", "debug", "ask")


def keyword_classification(message: str) -> Classification:
    """Route by keywords; the coder takes a request with none, with low confidence."""
    text = message.lower()
    scores: dict[str, int] = {}
    hits: dict[str, list[str]] = {}
    for agent in _TIE_ORDER:
        for weight, pattern in _KEYWORDS[agent]:
            for found in dict.fromkeys(m.group(0) for m in pattern.finditer(text)):
                scores[agent] = scores.get(agent, 0) + weight
                hits.setdefault(agent, []).append(found)
    # A question mark leans towards ask, but alone it is no keyword: the seed's default holds.
    if scores and text.rstrip().endswith("?"):
        scores["ask"] = scores.get("ask", 0) + 1
        hits.setdefault("ask", []).append("?")
    ranked = sorted(_TIE_ORDER, key=lambda agent: -scores.get(agent, 0))  # stable: tie order
    best, runner_up = ranked[0], ranked[1]
    if scores.get(best, 0) == 0:
        return Classification("coder", "low", "no routing keywords; default agent", "keywords")
    margin = scores[best] - scores.get(runner_up, 0)
    confidence: Confidence = "high" if margin >= 2 else "medium"
    return Classification(best, confidence, "keywords: " + ", ".join(hits[best]), "keywords")
