"""The ``remote`` executor: a catalog tool with a ``remote_endpoint``, called over HTTP.

The call's arguments are POSTed as JSON (headers name the session and the call); a 2xx
answer's body is the result, anything else — an HTTP error, a refused connection, the
tool's timeout — is a failed result the model reads. hitl has decided before (gated;
the tool's catalog risk is its rating), and the call is audited like an MCP call.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from services.orchestrator import metrics
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.peers.tool_source import DEFAULT_OUTPUT_CHARS, ToolOutcome, cap
from services.orchestrator.turn.executors.executions import record_execution
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.port import TurnPort
from services.orchestrator.turn.toolbox import Toolbox

DEFAULT_SECONDS = 30.0


async def post_arguments(
    http: httpx.AsyncClient,
    endpoint: str,
    call: LedgerCall,
    arguments: dict[str, Any],
    seconds: float,
) -> ToolOutcome:
    """One HTTP call of a remote tool; never raises for the endpoint's failures."""
    headers = {"X-CodeLab-Session": call.session_id, "X-CodeLab-Call": call.call_id}
    try:
        response = await http.post(endpoint, json=arguments, headers=headers, timeout=seconds)
    except httpx.TimeoutException:
        return ToolOutcome(f"Error: {call.tool_name} timed out after {seconds:g} s", False)
    except httpx.HTTPError as error:
        return ToolOutcome(f"Error: {call.tool_name} is unreachable: {error}", False)
    body = cap(response.text, DEFAULT_OUTPUT_CHARS)
    if response.is_success:
        return ToolOutcome(body, True)
    return ToolOutcome(f"Error: HTTP {response.status_code} from {call.tool_name}: {body}", False)


class RemoteTools:
    """POSTs calls of remote tools to their endpoints."""

    gated = True

    def __init__(
        self,
        port: TurnPort,
        ledger: Ledger,
        hitl: HitlClient,
        toolbox: Toolbox,
        http: httpx.AsyncClient,
    ) -> None:
        self.port = port
        self.ledger = ledger
        self.hitl = hitl
        self.toolbox = toolbox
        self.http = http

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        spec = await self.toolbox.spec_for(template, call.tool_name)
        endpoint = spec.remote_endpoint if spec is not None else ""
        await self.ledger.set_state(call, "dispatched", arguments=arguments)
        started = time.perf_counter()
        if not endpoint:
            outcome = ToolOutcome(f"Error: {call.tool_name} has no remote_endpoint", False)
        else:
            seconds = (
                float(spec.timeout_seconds) if spec and spec.timeout_seconds else DEFAULT_SECONDS
            )
            outcome = await post_arguments(self.http, endpoint, call, arguments, seconds)
        metrics.TOOL_SOURCE_CALLS.labels("remote", "ok" if outcome.ok else "error").inc()
        details = {
            "executor": "remote",
            "endpoint": endpoint,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        await record_execution(self.port, self.hitl, call, arguments, outcome, details)
        return False
