"""Streaming throughput: tokens per second for one session and for many at once, and what
each service spends in CPU per 1,000 tokens.

Each session asks the coder directly (``agent_type``: no routing call) for an answer of
``tokens`` words streamed at the configured pace; a token is one ``assistant_message``
event received over the WebSocket. The direct stream from the same upstream at the same
pace is the ceiling a single session could reach.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence

from bench.procs import cpu_delta, snapshot
from bench.report import Figure, first_error, num
from bench.sessions import close_many, open_many, streamed_turn
from bench.upstream import MODEL, Upstream, stream_tokens, words

SECTION = "Streaming throughput"
MARKER = "bench-stream"


def _level_name(sessions: int) -> str:
    if sessions == 1:
        return "1 session"
    return f"{sessions:,} concurrent sessions, aggregate"


async def measure(
    gateway: str,
    upstream: Upstream,
    processes: Mapping[str, list[int]],
    levels: Sequence[int],
    tokens: int,
    pace_ms: int,
) -> list[Figure]:
    """One figure per level, then CPU seconds per 1k tokens per service over all levels."""
    scenario = {"match": MARKER, "text": words(tokens), "token_delay_ms": pace_ms, "repeat": True}
    await upstream.enqueue([scenario])
    count, seconds = await stream_tokens(upstream.openai, MODEL, f"{MARKER} direct")
    figures = [
        Figure(
            SECTION,
            "direct: 1 stream from the scripted model (baseline)",
            num(count / seconds, 0),
            "tokens/s",
            {"tokens": count, "seconds": seconds},
        )
    ]
    spent: dict[str, float] = {}
    streamed = 0
    for sessions in levels:
        ids = [f"stream-{sessions}-{i}" for i in range(sessions)]
        sockets, refused = await open_many(gateway, ids)
        try:
            before = snapshot(processes)
            started = time.perf_counter()
            turns = await asyncio.gather(
                *(streamed_turn(ide, f"{MARKER} {i}", "coder") for i, ide in enumerate(sockets))
            )
            wall = time.perf_counter() - started
            after = snapshot(processes)
        finally:
            await close_many(sockets)
        total = sum(t.tokens for t in turns)
        errors = len(refused) + sum(1 for t in turns if t.error)
        for name, cpu in cpu_delta(before, after).items():
            spent[name] = spent.get(name, 0.0) + cpu
        streamed += total
        per_session = statistics.median(t.tokens / t.seconds for t in turns if t.seconds > 0)
        value = num(total / wall, 0)
        if sessions > 1:
            value += f" (per session p50 {num(per_session, 0)})"
        failures = [*refused, *(t.error for t in turns if t.error)]
        if errors:
            value += f", {errors} errors{first_error(failures)}"
        data: dict[str, object] = {
            "sessions": sessions,
            "tokens": total,
            "seconds": wall,
            "errors": errors,
            "first_errors": failures[:3],
        }
        figures.append(Figure(SECTION, _level_name(sessions), value, "tokens/s", data))
    for name, cpu in spent.items():
        per_k = cpu / streamed * 1000 if streamed else float("nan")
        figures.append(
            Figure(
                SECTION,
                f"CPU per 1k tokens: {name}",
                num(per_k, 3),
                "CPU s / 1k tokens",
                {"cpu_seconds": cpu, "tokens": streamed},
            )
        )
    return figures
