"""Token estimates: counted once per message when it is written, summed before a call.

No tokenizer ships in a package for every model family the runtime talks to (see
docs/decisions.md), so a message is estimated by its pieces: each run of up to four word
characters, each CJK character and each punctuation mark is a token. Against OpenAI's
o200k and cl100k vocabularies that errs high by a quarter to a third for code, English,
Russian, JSON, SQL and Chinese alike. The upstream's ``usage.prompt_tokens`` then corrects
the estimate per model (``Calibration``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Kana and Han: written without spaces, about a token a character in BPE vocabularies."""
_PIECE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]{{1,4}}|[^\w\s]")
MESSAGE_OVERHEAD = 4
"""Role, separators and the name: what a provider adds around every message."""
_MIN_RATIO, _MAX_RATIO = 0.5, 2.0
_WEIGHT = 0.3
"""How much one reported count moves the model's ratio (an exponential average)."""


def text_tokens(text: str) -> int:
    """Estimated tokens of ``text``."""
    if not text:
        return 0
    return sum(1 for _ in _PIECE.finditer(text))


@functools.lru_cache(maxsize=1024)
def fixed_text_tokens(text: str) -> int:
    """``text_tokens`` of text sent again with every call (system prompts, tool schemas),
    counted once."""
    return text_tokens(text)


def message_tokens(content: str, tool_calls: Iterable[Mapping[str, Any]] | None = None) -> int:
    """Estimated tokens of one stored message as the model reads it; its reasoning is
    counted apart (sent back only for templates that ask)."""
    total = MESSAGE_OVERHEAD + text_tokens(content)
    for call in tool_calls or ():
        total += MESSAGE_OVERHEAD + text_tokens(str(call.get("name", "")))
        total += text_tokens(str(call.get("arguments", "")))
    return total


class Calibration:
    """Per model, how the upstream's reported prompt tokens compare with the estimate.

    Kept in memory: it is relearned from the first call after a restart, and until then
    the estimate (which errs high for the scripted model and for BPE vocabularies on
    code) stands alone.
    """

    def __init__(self) -> None:
        self._ratios: dict[str, float] = {}

    def ratio(self, model: str) -> float:
        """Reported / estimated for ``model`` (1.0 before any report)."""
        return self._ratios.get(model, 1.0)

    def scale(self, model: str, estimate: int) -> int:
        """``estimate`` corrected for ``model``."""
        return round(estimate * self.ratio(model))

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """The upstream reported ``reported`` prompt tokens for a prompt estimated at
        ``estimated``; ignored when either is missing."""
        if estimated <= 0 or reported <= 0:
            return
        seen = min(max(reported / estimated, _MIN_RATIO), _MAX_RATIO)
        old = self._ratios.get(model)
        self._ratios[model] = seen if old is None else old + _WEIGHT * (seen - old)
