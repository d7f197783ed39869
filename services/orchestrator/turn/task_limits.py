"""The per-task budgets of seed 003 that the agent loop checks (see budgets.py for the rules):
clarifications and searches counted on the session, stop conditions ending a task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.orchestrator.agents.budgets import CLARIFICATION_TOOLS, SEARCH_TOOLS
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.state.store import SessionRow


def task_charge(session: SessionRow, template: AgentTemplate, tool: str) -> tuple[int, int] | None:
    """(clarifications, searches) a call of ``tool`` adds to the task's counts; None when
    its budget is spent (seed 003's max_clarifications, max_searches)."""
    budgets = template.budgets
    if tool in budgets.spent(session.clarifications_used, session.searches_used):
        return None
    asks = int(tool in CLARIFICATION_TOOLS and budgets.max_clarifications is not None)
    searches = int(tool in SEARCH_TOOLS and budgets.max_searches is not None)
    return asks, searches


def stop_answer(tool: str) -> str:
    """The task's answer when a stop condition (a completed call of ``tool``) ends it."""
    return f"Stopped: {tool} completed (a stop condition of the agent)."


@dataclass
class Budget:
    """Per-turn counters against the template's execution policy."""

    iterations: int = 0
    tool_calls: int = 0
    invalid: int = 0
    tokens: int = 0
    stop: str | None = None
    """A stop condition's tool whose call completed: the task ends before the next step."""


def turn_budget_spent(template: AgentTemplate, budget: Budget) -> tuple[str, int, int] | None:
    """(limit, used, max) of the first per-turn budget ``budget`` has spent, before a
    model call; None while there is room. Tool calls are checked as each is processed."""
    if budget.iterations >= template.max_iterations:
        return "max_iterations", budget.iterations, template.max_iterations
    if template.max_turn_tokens and budget.tokens >= template.max_turn_tokens:
        return "max_turn_tokens", budget.tokens, template.max_turn_tokens
    return None


def budget_details(limit: str, used: int, most: int) -> dict[str, Any]:
    """A turn budget's error details: a new turn may start at once (retry_after 0)."""
    return {"limit": limit, "used": used, "max": most, "scope": "turn", "retry_after": 0}
