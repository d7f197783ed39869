"""The per-task budgets of seed 003 that the agent loop checks (see budgets.py for the rules):
clarifications and searches counted on the session, stop conditions ending a task."""

from __future__ import annotations

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
