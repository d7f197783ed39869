"""LIMIT_* and LLM_PRICES parsing, prices per model, turn budgets."""

from __future__ import annotations

import pytest

from services.common.errors import SettingsError
from services.common.limit_settings import LimitSettings, Price, parse_prices
from services.common.settings import Settings
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.session.limits import retry_after
from services.orchestrator.turn.task_limits import Budget, turn_budget_spent


def test_everything_is_off_by_default() -> None:
    limits = Settings.from_env({}).limits
    assert limits == LimitSettings() and not limits.enabled


def test_limits_and_prices_from_the_environment() -> None:
    env = {
        "LIMIT_SESSIONS_OPEN": "3",
        "LIMIT_MESSAGES_PER_MINUTE": "20",
        "LIMIT_TOKENS_PER_DAY": "1000000",
        "LIMIT_COST_PER_DAY": "2.5",
        "LIMIT_SESSION_IDLE_SECONDS": "600",
        "LLM_PRICES": "gpt-4o-mini=0.15/0.60, gpt-4o=2.5/10,*=1/2",
    }
    limits = Settings.from_env(env).limits
    assert (limits.sessions_open, limits.messages_per_minute) == (3, 20)
    assert (limits.tokens_per_day, limits.cost_per_day) == (1_000_000, 2.5)
    assert limits.session_idle_seconds == 600 and limits.enabled
    assert limits.price_of("gpt-4o-mini") == Price(0.15, 0.60)
    assert limits.price_of("gpt-4o-2024-08-06") == Price(2.5, 10)  # the longest prefix
    assert limits.price_of("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60)
    assert limits.price_of("other") == Price(1, 2)
    assert limits.price_of("gpt-4o-mini").cost(1_000_000, 1_000_000) == pytest.approx(0.75)
    assert LimitSettings().price_of("anything").cost(10**6, 10**6) == 0


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LIMIT_SESSIONS_OPEN": "-1"}, "LIMIT_SESSIONS_OPEN"),
        ({"LIMIT_MESSAGES_PER_MINUTE": "1.5"}, "LIMIT_MESSAGES_PER_MINUTE"),
        ({"LIMIT_TOKENS_PER_DAY": "lots"}, "LIMIT_TOKENS_PER_DAY"),
        ({"LIMIT_COST_PER_DAY": "-0.1"}, "LIMIT_COST_PER_DAY"),
        ({"LLM_PRICES": "gpt-4o=2.5"}, "LLM_PRICES"),
        ({"LLM_PRICES": "=1/2"}, "LLM_PRICES"),
        ({"LLM_PRICES": "m=1/-2"}, "LLM_PRICES"),
        ({"LLM_PRICES": "m=a/b"}, "LLM_PRICES"),
    ],
)
def test_bad_limits_name_their_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_prices_parse_alone() -> None:
    assert parse_prices("") == {}
    assert parse_prices("a=0/0") == {"a": Price(0, 0)}


def test_retry_after_is_at_least_a_second() -> None:
    assert retry_after(0.01) == 1 and retry_after(59.2) == 60 and retry_after(-3) == 1


def template(**budget: int) -> AgentTemplate:
    return AgentTemplate("t", 1, "T", "", "", ("read_file",), **budget)  # type: ignore[arg-type]


def test_turn_budgets_before_a_model_call() -> None:
    tight = template(max_iterations=3, max_turn_tokens=100)
    assert turn_budget_spent(tight, Budget(iterations=2, tokens=99)) is None
    assert turn_budget_spent(tight, Budget(iterations=3)) == ("max_iterations", 3, 3)
    assert turn_budget_spent(tight, Budget(tokens=100)) == ("max_turn_tokens", 100, 100)
    assert turn_budget_spent(template(max_turn_tokens=0), Budget(tokens=10**9)) is None
