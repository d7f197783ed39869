"""Concurrency: many live WebSocket sessions, each doing a turn with a tool round trip.

Every socket is opened first (all live at once), then every session sends its message
together. The model calls ``read_file``; the bench, as the IDE, answers; the model then
sums the result up and the turn ends. Reported per level: errors (anything but a
completed turn), turn latency from the user's message to the final ``done``, the CPU each
process spent per turn and how busy that kept the box's cores, and resident memory per
session per process (peak while all sessions are live minus the level's start, divided by
the sessions).

Two passes. The burst: an unpaced model and every message sent at once, so every turn is
CPU work queued together and the latency grows with the sessions by construction (a
stress figure). The live pass: the messages arrive evenly over ``SPREAD_S`` seconds and
the model answers at a real model's pace (``PACED_TOKENS`` at ``PACED_TOKENS_PER_S``), as
the sessions of a box do; the mesh keeps up when the turn p50 at the largest level stays
within 2x of the smallest (the target).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence

from bench.procs import Load, busy_list, cpu_delta, snapshot
from bench.report import Figure, first_error, lower_median, num, spread
from bench.sessions import PeakMemory, Turn, close_many, open_many, tool_turn
from bench.upstream import Upstream
from clients.python.ide import IdeConnection

SECTION = "Concurrency"
PARTS = ("to the tool call", "to the answer's first token", "the answer")
"""``Turn.parts``, as the table names them."""
CPU_UNIT = "CPU ms / turn"
"""A level's CPU row: each process's CPU over the level's turns, per turn."""


PACED_TOKENS = 40
PACED_TOKENS_PER_S = 20.0
SPREAD_S = 10.0
"""Live pass: the sessions' messages arrive evenly over this window (people do not all
press enter in the same millisecond); the same window at every level."""


def paced_answer(session_id: str) -> dict[str, object]:
    """The answer after the tool result, at a real model's pace (the second call)."""
    return {
        "match": f"[{session_id}]",
        "text": " ".join(f"w{i}" for i in range(PACED_TOKENS)),
        "token_delay_ms": round(1000 / PACED_TOKENS_PER_S),
    }


async def _turn_at(ide: IdeConnection, delay: float) -> Turn:
    """The session's tool turn, sent ``delay`` seconds into the level (timed from then)."""
    if delay:
        await asyncio.sleep(delay)
    return await tool_turn(ide, f"bench-tool [{ide.session_id}] please read main.py")


def tool_scenario(session_id: str) -> dict[str, object]:
    """One read_file call for this session's first model call only.

    ``match`` looks at the last *user* message, which is still the same text when the
    model is called again after the tool result; a scenario per session used once
    (``times`` 1, not ``repeat``) lets that second call fall to the scripted model's
    default, which summarises the tool result in text.
    """
    return {
        "match": f"[{session_id}]",
        "tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}],
        "token_delay_ms": 0,
    }


def _memory(per_session: Mapping[str, float]) -> str:
    return " · ".join(f"{name} {num(kib, 1)}" for name, kib in per_session.items())


LIVE_PASSES = 3
"""The live pass runs this many times: on a 2-vCPU VM whose speed swings within minutes, one
pass's ratio for the same code ranged 1.4-3.7x. The table shows the pass with the median
ratio, every pass's ratio beside it, and the errors of all of them."""


async def measure(
    gateway: str, upstream: Upstream, processes: Mapping[str, list[int]], levels: Sequence[int]
) -> list[Figure]:
    """The burst at every level, then the live passes at the smallest and largest."""
    burst = await _pass(gateway, upstream, processes, levels, paced=False)
    ends = sorted({min(levels), max(levels)})
    passes = [
        await _pass(gateway, upstream, processes, ends, paced=True, tag=f"p{n}")
        for n in range(1, LIVE_PASSES + 1)
    ]
    return burst + median_pass(passes)


def median_pass(passes: Sequence[list[Figure]]) -> list[Figure]:
    """The figures of the pass whose ratio is the median (the lower middle of an even
    count), its ratio row listing every pass's ratio in the order they ran, and its error
    rows counting the errors of every pass."""
    ratios = [_ratio(figures) for figures in passes]
    chosen = lower_median(ratios)
    out: list[Figure] = []
    for figure in passes[chosen]:
        if figure.unit == "ratio" and len(passes) > 1:
            each = ", ".join(f"{num(r, 2)}x" for r in ratios)
            busy = [_busiest(figures) for figures in passes]
            shares = busy_list(busy)
            cores = f"; the cores busy at {int(figure.data['high']):,}: {shares}" if shares else ""
            value = f"{figure.value} (median of {len(passes)} passes: {each}{cores})"
            data = {**figure.data, "passes": ratios, "passes_busy_pct": busy}
            figure = dataclasses.replace(figure, value=value, data=data)
        elif figure.unit == "errors" and len(passes) > 1:
            same = [f for figures in passes for f in figures if f.name == figure.name]
            errors = sum(int(f.data["errors"]) for f in same)
            first = [e for f in same for e in f.data["first"]][:3]
            turns = sum(int(f.data["turns"]) for f in same)
            value = f"{errors} of {turns:,} turns over {len(passes)} passes{first_error(first)}"
            figure = dataclasses.replace(
                figure, value=value, data={"errors": errors, "first": first, "turns": turns}
            )
        out.append(figure)
    return out


def _ratio(figures: Sequence[Figure]) -> float:
    return next(float(f.data["ratio"]) for f in figures if f.unit == "ratio")


def _busiest(figures: Sequence[Figure]) -> float | None:
    """How busy the cores were during the pass's largest level (None: not measured)."""
    loads = [f for f in figures if f.unit == CPU_UNIT]
    if not loads:
        return None
    return float(max(loads, key=lambda f: int(f.data["sessions"])).data["busy_pct"])


async def _pass(
    gateway: str,
    upstream: Upstream,
    processes: Mapping[str, list[int]],
    levels: Sequence[int],
    paced: bool,
    tag: str = "",
) -> list[Figure]:
    """Errors, turn latency and memory per session for each level of live sessions
    (``tag``: in the session ids, which are then a pass's own)."""
    figures: list[Figure] = []
    medians: dict[int, float] = {}
    kind = "paced" if paced else "burst"
    for sessions in levels:
        # The model keeps its latest request bodies for tests; each level starts with none
        # (the log of the levels before it slowed the whole box, see scenarios.REQUEST_LOG).
        await upstream.forget_requests()
        ids = [f"conc-{kind}{tag}-{sessions}-{i}" for i in range(sessions)]
        second = [paced_answer(sid) for sid in ids] if paced else []
        await upstream.enqueue([tool_scenario(sid) for sid in ids] + second)
        async with PeakMemory(processes) as memory:
            start = dict(memory.peak)  # read as the level starts
            sockets, refused = await open_many(gateway, ids)
            try:
                apart = SPREAD_S / len(sockets) if paced and sockets else 0.0
                before, started = snapshot(processes), time.perf_counter()
                turns = await asyncio.gather(
                    *(_turn_at(ide, index * apart) for index, ide in enumerate(sockets))
                )
                load = Load(cpu_delta(before, snapshot(processes)), time.perf_counter() - started)
                memory.sample()  # every session still open
            finally:
                await close_many(sockets)
        errors = refused + [t.error for t in turns if t.error]
        latency = spread([t.seconds * 1000 for t in turns if not t.error])
        parts = _parts(turns)
        medians[sessions] = latency["p50"]
        per_session = {
            name: (memory.peak[name] - start.get(name, 0)) / sessions
            for name in memory.peak
            if name != "bench client"
        }
        pace = (
            f"sent over {SPREAD_S:g} s, answer at {PACED_TOKENS_PER_S:g} tok/s"
            if paced
            else "burst, unpaced model"
        )
        label = f"{sessions:,} live WebSockets, turn with a tool round trip ({pace})"
        figures += [
            Figure(
                SECTION,
                f"{label}: errors",
                f"{len(errors)} of {sessions:,} turns{first_error(errors)}",
                "errors",
                {"errors": len(errors), "first": errors[:3], "turns": sessions},
                "0",
            ),
            Figure(
                SECTION,
                f"{label}: turn latency",
                f"p50 {num(latency['p50'], 0)} · p99 {num(latency['p99'], 0)}{_by_part(parts)}",
                "ms",
                {**latency, "parts_p50": parts},
            ),
            Figure(
                SECTION,
                f"{label}: CPU per turn",
                f"{load.split(sessions / 1000, 1, processes=True)}; {load.describe()}",
                CPU_UNIT,
                {"sessions": sessions, "busy_pct": load.busy, **load.as_data()},
            ),
            Figure(
                SECTION,
                f"{label}: resident memory per session",
                _memory(per_session),
                "KiB/session",
                {"kib_per_session": per_session, "start_kib": dict(start), "peak_kib": memory.peak},
            ),
        ]
    return figures + _growth(medians, paced)


def _parts(turns: Sequence[Turn]) -> dict[str, float]:
    """Median milliseconds of each part of the completed turns (``Turn.parts``): where a
    level's extra latency waits, at the turn's start or in its stream."""
    timed = [turn.parts for turn in turns if turn.parts and not turn.error]
    if not timed:
        return {}
    return {name: statistics.median(t[i] for t in timed) * 1000 for i, name in enumerate(PARTS)}


def _by_part(parts: Mapping[str, float]) -> str:
    if not parts:
        return ""
    return " (p50 by part: " + " · ".join(f"{k} {num(v, 0)}" for k, v in parts.items()) + ")"


def _growth(medians: Mapping[int, float], paced: bool) -> list[Figure]:
    """Turn p50 at the largest level over the smallest: how latency grows with sessions."""
    if len(medians) < 2:
        return []
    low, high = min(medians), max(medians)
    ratio = medians[high] / medians[low] if medians[low] else float("nan")
    pace = "sent over time, model at a real pace" if paced else "burst, unpaced model"
    return [
        Figure(
            SECTION,
            f"turn p50 at {high:,} live sessions over {low:,} ({pace})",
            f"{num(ratio, 2)}x",
            "ratio",
            {
                "low": low,
                "high": high,
                "p50_low_ms": medians[low],
                "p50_high_ms": medians[high],
                "ratio": ratio,
            },
            "<= 2x (1,000 over 100)" if paced else "",
        )
    ]
