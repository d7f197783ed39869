"""execution_policy's optional budgets: their stored form and what they refuse."""

from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.agents.budgets import (
    CLARIFICATION_TOOLS,
    SEARCH_TOOLS,
    Budgets,
    canonical_budgets,
)
from services.orchestrator.agents.template_rules import canonical
from services.orchestrator.agents.templates import AgentTemplate, builtin_definitions
from services.orchestrator.errors import InvalidBudget


def test_given_budgets_are_stored_and_absent_ones_are_not() -> None:
    base = builtin_definitions()[0]
    assert set(canonical(base)["execution_policy"]) == {
        "max_iterations", "max_tool_calls", "max_invalid_arguments",
    }  # fmt: skip
    policy = {
        "max_clarifications": 2,
        "max_searches": 0,
        "timeouts": {"llm_seconds": 30, "approval_seconds": 600},
        "stop_conditions": ["tool:write_file", "tool:write_file"],
    }
    stored = canonical({**base, "execution_policy": policy})["execution_policy"]
    assert stored["timeouts"] == {"llm_seconds": 30.0, "approval_seconds": 600}
    assert stored["stop_conditions"] == ["tool:write_file"]
    budgets = AgentTemplate.from_definition({**base, "execution_policy": policy}).budgets
    assert budgets == Budgets(2, 0, 30.0, 600, frozenset({"write_file"}))


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"max_clarifications": -1}, "max_clarifications"),
        ({"max_searches": True}, "max_searches"),
        ({"max_searches": 1.5}, "max_searches"),
        ({"timeouts": {"llm_seconds": 0}}, "timeouts.llm_seconds"),
        ({"timeouts": {"tool_seconds": 5}}, "timeouts"),
        ({"timeouts": 30}, "timeouts"),
        ({"stop_conditions": ["write_file"]}, "stop_conditions"),
        ({"stop_conditions": "tool:x"}, "stop_conditions"),
        ({"stop_conditions": ["tool:"]}, "stop_conditions"),
    ],
)
def test_bad_budgets_are_refused(policy: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidBudget, match=problem) as refused:
        canonical_budgets(policy)
    assert refused.value.code == "MISSING_REQUIRED_FIELD"


def test_spent_budgets_name_their_tools() -> None:
    budgets = Budgets(max_clarifications=1, max_searches=2)
    assert budgets.spent(0, 1) == frozenset()
    assert budgets.spent(1, 1) == CLARIFICATION_TOOLS
    assert budgets.spent(1, 2) == CLARIFICATION_TOOLS | SEARCH_TOOLS
    assert Budgets().spent(100, 100) == frozenset()
