"""What every call the runtime runs itself leaves behind (MCP and remote tools): the tool
message the model reads, the ledger's outcome and one ``tool_execution`` audit row."""

from __future__ import annotations

from typing import Any

from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.peers.tool_source import ToolOutcome
from services.orchestrator.turn.ledger import LedgerCall
from services.orchestrator.turn.port import TurnPort

RUNTIME_USER = "runtime"
"""The audit log's user of calls the runtime ran itself (the human is in the approval row)."""


async def record_execution(
    port: TurnPort,
    hitl: HitlClient,
    call: LedgerCall,
    arguments: dict[str, Any],
    outcome: ToolOutcome,
    details: dict[str, Any],
) -> None:
    """The outcome of a call the runtime ran: the tool message, the ledger, the audit."""
    state = "completed" if outcome.ok else "failed"
    await port.complete(call, outcome.content, state)
    await hitl.audit(
        call.session_id,
        "tool_execution",
        state,
        RUNTIME_USER,
        call.call_id,
        tool_name=call.tool_name,
        original=arguments,
        details={**details, "approval": call.reason or ""},
    )
