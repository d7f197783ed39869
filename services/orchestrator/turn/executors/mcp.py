"""The ``mcp`` executor: a tool of a registered MCP server, run by the runtime itself.

hitl has decided before ``run`` (the executor is gated; the source's risk is the tool's
risk in the catalog). The call is marked dispatched while it runs, so a replica that dies
meanwhile leaves it to the tool-timeout sweep instead of running it twice. Whatever
happens — a result, the server's error, a timeout, a source that is gone — the model
reads it as the tool's result, the ledger keeps it, and the audit log gets one
``tool_execution`` row.
"""

from __future__ import annotations

import time
from typing import Any

from services.common.errors import ServiceError
from services.orchestrator import metrics
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.peers.mcp_sources import McpSources
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.peers.tool_source import ToolOutcome
from services.orchestrator.turn.executors.executions import record_execution
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.port import TurnPort


class McpTools:
    """Runs calls of ``<source>.<tool>`` on the source's shared connection."""

    gated = True

    def __init__(
        self, port: TurnPort, ledger: Ledger, hitl: HitlClient, sources: McpSources
    ) -> None:
        self.port = port
        self.ledger = ledger
        self.hitl = hitl
        self.sources = sources

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        source = call.tool_name.partition(".")[0]
        await self.ledger.set_state(call, "dispatched", arguments=arguments)
        started = time.perf_counter()
        try:
            connection = self.sources.connection_for(call.tool_name)
            outcome = await connection.call(call.tool_name, arguments)
            code = "" if outcome.ok else "TOOL_ERROR"
        except ServiceError as error:
            outcome, code = ToolOutcome(f"Error: {error.message}", False), error.code
        metrics.TOOL_SOURCE_CALLS.labels(source, "ok" if outcome.ok else "error").inc()
        details = {
            "executor": "mcp",
            "source": source,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            "error_code": code,
        }
        await record_execution(self.port, self.hitl, call, arguments, outcome, details)
        return False
