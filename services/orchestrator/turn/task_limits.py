"""The per-task budgets of seed 003 that the agent loop checks (see budgets.py for the rules):
clarifications and searches counted on the session, stop conditions ending a task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.orchestrator.agents.budgets import CLARIFICATION_TOOLS, SEARCH_TOOLS
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.turn.ledger import LedgerCall

if TYPE_CHECKING:
    from services.orchestrator.turn.loop import AgentLoop, Budget


class TaskLimits:
    """Counts and stops against a template's budgets, for one agent loop."""

    def __init__(self, loop: AgentLoop) -> None:
        self.loop = loop

    async def spend(self, sid: str, template: AgentTemplate, tool: str) -> bool:
        """Count a clarification or a search against the task's budget; False when the
        budget is spent (seed 003's max_clarifications, max_searches)."""
        budgets = template.budgets
        session = await self.loop.session(sid)
        if tool in budgets.spent(session.clarifications_used, session.searches_used):
            return False
        asks = int(tool in CLARIFICATION_TOOLS and budgets.max_clarifications is not None)
        searches = int(tool in SEARCH_TOOLS and budgets.max_searches is not None)
        if asks or searches:
            self.loop.update_session(
                sid,
                clarifications_used=session.clarifications_used + asks,
                searches_used=session.searches_used + searches,
            )
            await self.loop.store.spend_budget(sid, asks, searches)
        return True

    async def stop_tools(self, call: LedgerCall) -> frozenset[str]:
        """The tools whose completed call ends the task of ``call``'s agent."""
        session = await self.loop.session(call.session_id)
        if not (self.loop.agents.has(call.agent) or call.agent in session.agent_versions):
            return frozenset()
        return (await self.loop.template(call.session_id, call.agent)).budgets.stop_tools

    async def stop_condition(self, sid: str, budget: Budget) -> None:
        """A stop condition held: the task ends as if the agent had answered."""
        answer = f"Stopped: {budget.stop} completed (a stop condition of the agent)."
        budget.stop = None
        if self.loop.plans is not None and await self.loop.plans.agent_finished(sid, answer):
            await self.loop.advance(sid)
            return
        await self.loop.finish(sid, await self.loop.current(sid), answer)
