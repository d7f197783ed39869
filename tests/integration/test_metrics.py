"""The figures the Grafana dashboard reads: TTFT, tokens, sessions, approvals waiting,
errors by code, each moved by a real turn."""

from __future__ import annotations

import asyncio
import json

from prometheus_client import REGISTRY

from tests.support.ide import ide, of
from tests.support.mesh import Mesh


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def eventually(name: str, value: float, polls: int = 200) -> None:
    """Gauges refreshed by a background probe reach ``value`` within a few polls."""
    for _ in range(polls):
        if sample(name) == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} stayed at {sample(name)}, expected {value}")


async def test_a_turn_moves_the_dashboard_figures(mesh: Mesh) -> None:
    ttft = sample("codelab_llm_ttft_seconds_count", purpose="turn")
    completion = sample("codelab_llm_tokens_total", kind="completion")
    invalid = sample("codelab_errors_total", code="INVALID_MESSAGE_TYPE")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "x"}}]}
    )
    async with ide(mesh, "figures") as client:
        first = await client.say("write a.md", agent_type="coder")
        assert of(first, "tool_call")[0]["requires_approval"] is True
        assert sample("codelab_sessions_active") >= 1
        await eventually("codelab_approvals_waiting", 1)  # read from hitl's table
        await client.send({"type": "teleport"})
        refused = json.loads(await client.ws.recv())
        assert refused["error_code"] == "INVALID_MESSAGE_TYPE"
        await client.decide(of(first, "tool_call")[0]["call_id"], "reject")
        await eventually("codelab_approvals_waiting", 0)
    assert sample("codelab_llm_ttft_seconds_count", purpose="turn") > ttft
    assert sample("codelab_llm_tokens_total", kind="completion") > completion
    assert sample("codelab_errors_total", code="INVALID_MESSAGE_TYPE") == invalid + 1
