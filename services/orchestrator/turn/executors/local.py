"""The ``local`` executor: tools the runtime computes itself (see local_tools)."""

from __future__ import annotations

from typing import Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.turn.executors.local_tools import run_local_tool
from services.orchestrator.turn.ledger import LedgerCall
from services.orchestrator.turn.port import TurnPort


class LocalTools:
    """Runs a pure local tool and records its result; the loop goes on."""

    gated = False

    def __init__(self, port: TurnPort) -> None:
        self.port = port

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        result = run_local_tool(call.tool_name, arguments)
        await self.port.complete(call, result.content, "completed" if result.ok else "failed")
        return False
