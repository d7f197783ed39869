"""``python -m bench --quick``: the benchmark suite runs against the real processes and prints
every figure. This is the only place CI runs the bench code; it checks that the suite works,
never what the numbers are (benchmarks report, they do not judge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

# One name per figure of the issue; counts differ in --quick, so names leave them out.
FIGURES = (
    "Time to first token",
    "direct: openai SDK -> scripted model (baseline)",
    "direct: raw HTTP client (httpx, as the SSE row's) -> scripted model",
    "p50 over the raw client",
    "WebSocket, multi-agent default (routing call + agent)",
    "WebSocket, agent_type=coder (no routing call)",
    "WebSocket, single-agent mode (MULTI_AGENT_MODE=false)",
    "SSE /agent/message/stream, agent_type=coder",
    "/v1/chat/completions (gateway, stream",
    "Streaming throughput",
    "direct: 1 stream from the scripted model, unpaced (baseline)",
    "tokens/s, first to last token (baseline)",
    "the routing call alone",
    "1 session, unpaced upstream",
    "concurrent sessions, unpaced upstream, aggregate",
    "tokens/s each: pace kept",
    "CPU per 1k tokens: mesh total",
    "CPU per 1k tokens: gateway",
    "CPU per 1k tokens: orchestrator",
    "CPU per 1k tokens: llmproxy",
    "CPU per 1k tokens: postgres",
    "Concurrency",
    "live WebSockets, turn with a tool round trip (burst, unpaced model): errors",
    "live WebSockets, turn with a tool round trip (burst, unpaced model): turn latency",
    "(sent over 10 s, answer at 20 tok/s): turn latency",
    "resident memory per session",
    "live sessions over 10 (burst, unpaced model)",
    "live sessions over 10 (sent over time, model at a real pace)",
    "Tool search",
    "SearchTools over",
    "ListTools of the whole catalog",
    "first SearchTools after the import",
    "more tools (to",
    "Persistence",
    "events committed",
    "(GetHistory)",
    "resume over WebSocket: replay",
    "the same replay through aiohttp's client",
    "first token of the next turn",
    "Soak",
    "sessions opened, answered and closed",
    "resident memory: orchestrator",
    "resident memory: gateway",
    "Command policy",
    "dangerous lines",
    "everyday lines",
    "Machine:",
    "box speed, ms for 1,000,000 Python loop steps before each section",
    "Target",
)


def test_quick_bench_prints_every_figure(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--results-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = f"stdout:\n{run.stdout[-4000:]}\nstderr:\n{run.stderr[-4000:]}"
    assert run.returncode == 0, report
    missing = [name for name in FIGURES if name not in run.stdout]
    assert not missing, f"missing {missing}\n{report}"
    assert list(tmp_path.glob("bench-*.json")), report
