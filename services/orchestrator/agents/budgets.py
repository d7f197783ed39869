"""Seed 003's execution budgets beyond iterations and tool calls (pure rules).

A template's ``execution_policy`` may also name (each optional; absent means no limit)::

    max_clarifications  questions to the user per task (ask_followup_question, prompt_user)
    max_searches        searches per task (search_in_code, search_in_project, tool_search,
                        agent_search)
    timeouts            {llm_seconds: one model call, approval_seconds: a pending approval}
    stop_conditions     ["tool:<name>"]: the task ends once a call of <name> completed

A spent budget takes its tools out of the prompt (seed 003 §5.3: "tool availability
rules"); a call made anyway is refused and the model told why. Counts live on the
session and start again with the next task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.orchestrator.errors import InvalidBudget

CLARIFICATION_TOOLS = frozenset({"ask_followup_question", "prompt_user"})
SEARCH_TOOLS = frozenset({"search_in_code", "search_in_project", "tool_search", "agent_search"})
OPTIONAL_KEYS = ("max_clarifications", "max_searches", "timeouts", "stop_conditions")
TIMEOUT_LIMITS: Mapping[str, tuple[float, float]] = {
    "llm_seconds": (1, 3600),
    "approval_seconds": (1, 7 * 24 * 3600),
}
COUNT_LIMIT = 1000
STOP_PREFIX = "tool:"


@dataclass(frozen=True)
class Budgets:
    """The optional budgets of one template version."""

    max_clarifications: int | None = None
    max_searches: int | None = None
    llm_seconds: float | None = None
    approval_seconds: int | None = None
    stop_tools: frozenset[str] = frozenset()

    @classmethod
    def of(cls, policy: Mapping[str, Any]) -> Budgets:
        """The budgets of a canonical execution_policy."""
        timeouts = policy.get("timeouts") or {}
        return cls(
            max_clarifications=policy.get("max_clarifications"),
            max_searches=policy.get("max_searches"),
            llm_seconds=timeouts.get("llm_seconds"),
            approval_seconds=timeouts.get("approval_seconds"),
            stop_tools=frozenset(
                c[len(STOP_PREFIX) :] for c in policy.get("stop_conditions") or ()
            ),
        )

    def spent(self, clarifications: int, searches: int) -> frozenset[str]:
        """The tools whose budget ``clarifications`` / ``searches`` used up."""
        spent: set[str] = set()
        if self.max_clarifications is not None and clarifications >= self.max_clarifications:
            spent |= CLARIFICATION_TOOLS
        if self.max_searches is not None and searches >= self.max_searches:
            spent |= SEARCH_TOOLS
        return frozenset(spent)

    def refusal(self, tool: str) -> str:
        """What the model is told when it calls ``tool`` past its budget."""
        if tool in CLARIFICATION_TOOLS:
            return (
                f"the clarification budget ({self.max_clarifications} per task) is used up: "
                "go on with your best assumption"
            )
        return f"the search budget ({self.max_searches} per task) is used up: use what you found"


def _count(policy: Mapping[str, Any], key: str) -> int | None:
    value = policy.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= COUNT_LIMIT:
        raise InvalidBudget(f"'execution_policy.{key}' must be an integer 0..{COUNT_LIMIT}")
    return value


def canonical_budgets(policy: Mapping[str, Any]) -> dict[str, Any]:
    """The optional budgets of ``policy`` in their stored form (only those given)."""
    out: dict[str, Any] = {}
    for key in ("max_clarifications", "max_searches"):
        count = _count(policy, key)
        if count is not None:
            out[key] = count
    timeouts = policy.get("timeouts")
    if timeouts is not None:
        if not isinstance(timeouts, Mapping) or set(timeouts) - set(TIMEOUT_LIMITS):
            raise InvalidBudget(
                f"'execution_policy.timeouts' must be an object of {sorted(TIMEOUT_LIMITS)}"
            )
        for key, value in timeouts.items():
            low, high = TIMEOUT_LIMITS[key]
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not low <= value <= high:
                raise InvalidBudget(
                    f"'execution_policy.timeouts.{key}' must be a number {low:g}..{high:g}"
                )
        out["timeouts"] = {
            k: int(v) if k == "approval_seconds" else float(v) for k, v in timeouts.items()
        }
    stops = policy.get("stop_conditions")
    if stops is not None:
        good = isinstance(stops, list) and all(
            isinstance(s, str) and s.startswith(STOP_PREFIX) and len(s) > len(STOP_PREFIX)
            for s in stops
        )
        if not good:
            raise InvalidBudget(
                "'execution_policy.stop_conditions' must be a list of 'tool:<name>'"
            )
        out["stop_conditions"] = list(dict.fromkeys(stops))
    return out
