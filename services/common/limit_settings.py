"""Per-key limits and the model price table, from LIMIT_* and LLM_PRICES.

Every limit is 0 (off) unless set: a fresh ``make run`` limits nothing. The per-turn
budgets (tool calls, tokens) are each template's ``execution_policy``, not settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.common.env_values import number
from services.common.errors import SettingsError


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, prompt and completion."""

    prompt: float
    completion: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


def parse_prices(raw: str) -> dict[str, Price]:
    """``model=in/out,...`` (dollars per million tokens); ``*`` prices any other model."""
    prices: dict[str, Price] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        model, sep, pair = item.partition("=")
        prompt, slash, completion = pair.partition("/")
        try:
            price = Price(float(prompt), float(completion))
        except ValueError:
            price = Price(-1, -1)
        if not sep or not slash or not model.strip() or min(price.prompt, price.completion) < 0:
            raise SettingsError(
                f"LLM_PRICES entries must be model=prompt/completion (USD per 1M tokens), "
                f"got {item!r}"
            )
        prices[model.strip()] = price
    return prices


def _amount(env: Mapping[str, str], name: str, default: float) -> float:
    return number(env, name, default, error=SettingsError)


@dataclass(frozen=True)
class LimitSettings:
    """What one API key (user) may use; 0 turns a limit off."""

    sessions_open: int = 0
    """LIMIT_SESSIONS_OPEN: sessions a user may have open at once."""
    session_idle_seconds: float = 900.0
    """LIMIT_SESSION_IDLE_SECONDS: a session without activity this long no longer counts."""
    messages_per_minute: int = 0
    """LIMIT_MESSAGES_PER_MINUTE: user messages per user per clock minute."""
    tokens_per_day: int = 0
    """LIMIT_TOKENS_PER_DAY: prompt + completion tokens per user per UTC day."""
    cost_per_day: float = 0.0
    """LIMIT_COST_PER_DAY: US dollars per user per UTC day, priced by LLM_PRICES."""
    prices: Mapping[str, Price] = field(default_factory=dict)
    """LLM_PRICES: ``model=prompt/completion`` USD per million tokens; ``*`` for the rest."""

    @property
    def enabled(self) -> bool:
        return bool(
            self.sessions_open
            or self.messages_per_minute
            or self.tokens_per_day
            or self.cost_per_day
        )

    def price_of(self, model: str) -> Price:
        """The model's price; a dated name (gpt-4o-2024-08-06) takes its family's
        (the longest listed prefix), then ``*``, then free."""
        if model in self.prices:
            return self.prices[model]
        family = max(
            (m for m in self.prices if m != "*" and model.startswith(m)), key=len, default=""
        )
        return self.prices.get(family) or self.prices.get("*") or Price(0.0, 0.0)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LimitSettings:
        def whole(name: str) -> int:
            value = _amount(env, name, 0)
            if value != int(value):
                raise SettingsError(f"{name} must be a whole number, got {env.get(name)!r}")
            return int(value)

        return cls(
            sessions_open=whole("LIMIT_SESSIONS_OPEN"),
            session_idle_seconds=_amount(
                env, "LIMIT_SESSION_IDLE_SECONDS", cls.session_idle_seconds
            )
            or cls.session_idle_seconds,
            messages_per_minute=whole("LIMIT_MESSAGES_PER_MINUTE"),
            tokens_per_day=whole("LIMIT_TOKENS_PER_DAY"),
            cost_per_day=_amount(env, "LIMIT_COST_PER_DAY", 0.0),
            prices=parse_prices(env.get("LLM_PRICES", "")),
        )
