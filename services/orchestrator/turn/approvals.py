"""The human-in-the-loop gate in front of gated executors (IDE and remote tools).

hitl's policy decides; a call that needs a human is recorded as awaiting approval and the
session waits. A patch the person already approved in the IDE's review passes at once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.state import events
from services.orchestrator.turn.executors.ide import tool_call_event
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.patch_review import reviewed
from services.orchestrator.turn.port import TurnPort
from services.orchestrator.turn.toolbox import ToolSpec

APPROVED_IN_REVIEW = "approved in the IDE's patch review"
RATED_EXECUTORS = frozenset({"mcp", "remote"})
"""Executors whose tools hitl judges by the catalog's risk (their source's rating)."""


def rated_risk(spec: ToolSpec) -> str:
    """The risk hitl should weigh for ``spec``: a tool source's rating, else none."""
    return spec.risk if spec.executor in RATED_EXECUTORS else ""


class ApprovalGate:
    """Holds calls that need a human's decision."""

    def __init__(self, port: TurnPort, ledger: Ledger, hitl: HitlClient) -> None:
        self.port = port
        self.ledger = ledger
        self.hitl = hitl

    async def hold(
        self,
        call: LedgerCall,
        template: AgentTemplate,
        arguments: dict[str, Any],
        audience: str,
        risk: str = "",
    ) -> LedgerCall | None:
        """None when ``call`` now waits for a human (its events sent); otherwise the call
        to run, with the reason it may run when there is one. ``audience``: the session
        the IDE sees, where approvals belong (a delegate's go to its parent); ``risk``:
        the tool source's rating of the tool (``rated_risk``)."""
        sid = call.session_id
        if call.tool_name == "apply_patch" and reviewed(
            arguments.get("patch", ""), await self.ledger.reviewed_patches(sid)
        ):
            return dataclasses.replace(call, reason=APPROVED_IN_REVIEW)
        verdict = await self.hitl.evaluate(
            sid, template.name, call.tool_name, arguments, template.hitl, risk
        )
        if not verdict.requires_approval:
            return dataclasses.replace(call, reason=None)
        await self.hitl.create_approval(
            audience,
            call.call_id,
            template.name,
            call.tool_name,
            arguments,
            verdict,
            call.plan_id,
            call.step_id,
            template.budgets.approval_seconds,
        )
        await self.ledger.set_state(
            call,
            "awaiting_approval",
            arguments=arguments,
            reason=verdict.reason,
            requires_approval=True,
        )
        await self.port.emit(
            sid,
            tool_call_event(call, arguments, True, verdict.reason),
            events.call_status(
                call.call_id,
                "waiting_human",
                call.tool_name,
                plan_id=call.plan_id,
                step_id=call.step_id,
            ),
            events.done("awaiting_approval"),
        )
        return None
