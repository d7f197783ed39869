"""Agent-as-tool: ``agent.<template>`` hands a task to another agent in a child session.

The child keeps its own history and ledger; what the IDE must see (its tool calls,
approvals, ``done``) goes to the parent's client, progress as agent_chain_update. When the
child answers, that answer is the result of the parent's call and the parent goes on.
Delegates do not delegate further (their templates are offered without agent tools).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.state import events
from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.ledger import LedgerCall

if TYPE_CHECKING:
    from services.orchestrator.turn.loop import AgentLoop


class Delegation:
    """Starts child sessions and returns their answers to the delegating call."""

    def __init__(self, loop: AgentLoop) -> None:
        self.loop = loop

    async def start(self, call: LedgerCall, template: AgentTemplate, tool: str, task: str) -> bool:
        """Run ``task`` with another agent in a child session; its answer returns here."""
        target = tool.split(".", 1)[1]
        parent = await self.loop.session(call.session_id)
        child = f"{call.session_id}.{call.call_id}"
        await self.loop.store.create_child(
            child, parent.user_id, target, call.session_id, call.call_id
        )
        await self.loop.ledger.set_state(call, "delegated", result={"child_session": child})
        await self.loop.store.add_message(child, StoredMessage("user", task))
        await self.loop.emit(call.session_id, self.chain(call, template.name, target, "running"))
        await self.loop.advance(child)
        return True

    def chain(self, call: LedgerCall, parent_agent: str, child_agent: str, status: str) -> Any:
        return events.agent_chain_update(
            call.call_id,
            [
                (parent_agent, "delegator", "waiting" if status == "running" else "running"),
                (child_agent, "delegate", status),
            ],
            child_agent if status == "running" else parent_agent,
        )

    async def finished(self, child: str, answer: str) -> None:
        """The delegate answered: that is the result of the parent's agent.* call."""
        parent = await self.loop.store.parent_of(child)
        assert parent is not None
        call = await self.loop.ledger.get(parent[0], parent[1])
        if call is None or call.state != "delegated":
            return
        child_agent = (await self.loop.session(child)).current_agent
        await self.loop.complete(call, answer or "(the agent gave no answer)")
        await self.loop.emit(
            call.session_id,
            self.chain(call, call.agent, child_agent, "done"),
            events.execution_completed(
                "delegation",
                call.call_id,
                "completed",
                answer,
                plan_id=call.plan_id,
                agent=call.agent,
            ),
        )
        await self.loop.advance(call.session_id)
