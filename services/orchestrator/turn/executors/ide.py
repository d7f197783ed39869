"""IDE tools: the call goes to the IDE, which runs it and answers with a tool_result."""

from __future__ import annotations

from typing import Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.state import events
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.port import TurnPort


def tool_call_event(
    call: LedgerCall, arguments: dict[str, Any], approval: bool, reason: str | None
) -> Any:
    """The tool_call event of ``call`` (``approval``: it waits for a human first)."""
    return events.tool_call(
        call.call_id,
        call.tool_name,
        arguments,
        requires_approval=approval,
        reason=reason,
        agent=call.agent,
        plan_id=call.plan_id,
        step_id=call.step_id,
    )


class IdeTools:
    """Sends a call to the IDE and waits for its tool_result (``call.reason``: why it may
    run, shown beside it, e.g. the approval it got)."""

    gated = True

    def __init__(self, port: TurnPort, ledger: Ledger) -> None:
        self.port = port
        self.ledger = ledger

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        # Dispatched by the commit that sends it: never one without the other.
        await self.port.emit(
            call.session_id,
            tool_call_event(call, arguments, False, call.reason),
            events.done("awaiting_tool_result"),
            changes=[self.ledger.dispatching(call, arguments)],
        )
        return True
