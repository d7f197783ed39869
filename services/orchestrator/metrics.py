"""The orchestrator's Prometheus figures beyond the per-RPC ones (services/common/metrics.py)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SESSIONS_ACTIVE = Gauge(
    "codelab_sessions_active", "Sessions with a worker on this replica (owned, recently used)"
)
ERRORS = Counter("codelab_errors_total", "Error events sent to clients, by spec code", ["code"])
TOOL_SOURCE_UP = Gauge(
    "codelab_tool_source_up", "1 while this replica is connected to the MCP server", ["source"]
)
TOOL_SOURCE_CALLS = Counter(
    "codelab_tool_source_calls_total",
    "Calls of tools on MCP servers and remote endpoints, by outcome",
    ["source", "outcome"],
)
