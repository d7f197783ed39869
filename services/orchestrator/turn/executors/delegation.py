"""Agent-as-tool: ``agent.<template>`` hands a task to another agent in a child session.

The child keeps its own history and ledger; what the IDE must see (its tool calls,
approvals, ``done``) goes to the parent's client, progress as agent_chain_update. When the
child answers, that answer is the result of the parent's call and the parent goes on.
Delegates do not delegate further (their templates are offered without agent tools).
"""

from __future__ import annotations

from typing import Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.state import events
from services.orchestrator.state.store import SessionStore, StoredMessage
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.port import TurnPort

# The parts of an agent tool's arguments, in the order the delegate reads them.
TASK_PARTS = (("task", ""), ("context", "Context"), ("constraints", "Constraints"))


def task_text(arguments: dict[str, Any]) -> str:
    """The delegate's first message: the task, then its context and constraints."""
    return "\n\n".join(
        f"{label}: {arguments[key]}" if label else arguments[key]
        for key, label in TASK_PARTS
        if arguments.get(key)
    )


class Delegation:
    """The ``agent`` executor: starts child sessions and returns their answers to the
    delegating call."""

    gated = False

    def __init__(self, port: TurnPort, store: SessionStore, ledger: Ledger) -> None:
        self.port = port
        self.store = store
        self.ledger = ledger

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        """Run the task with another agent in a child session; its answer returns here."""
        target = call.tool_name.split(".", 1)[1]
        parent = await self.port.session(call.session_id)
        child = f"{call.session_id}.{call.call_id}"
        await self.store.create_child(child, parent.user_id, target, call.session_id, call.call_id)
        await self.ledger.set_state(call, "delegated", result={"child_session": child})
        await self.store.add_message(child, StoredMessage("user", task_text(arguments)))
        await self.port.emit(call.session_id, self.chain(call, template.name, target, "running"))
        await self.port.advance(child)
        return True

    @staticmethod
    def chain(call: LedgerCall, parent_agent: str, child_agent: str, status: str) -> Any:
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
        parent = await self.store.parent_of(child)
        assert parent is not None
        call = await self.ledger.get(parent[0], parent[1])
        if call is None or call.state != "delegated":
            return
        child_agent = (await self.port.session(child)).current_agent
        await self.port.complete(call, answer or "(the agent gave no answer)")
        await self.port.emit(
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
        await self.port.advance(call.session_id)
