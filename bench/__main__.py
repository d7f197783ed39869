"""``python -m bench``: every figure of the suite in one run, printed as one table.

One mesh (multi-agent, the default) serves every section; a second one with
``MULTI_AGENT_MODE=false`` runs beside it only while time to first token is measured, so
both modes are sampled side by side. Sections run in this order because each leaves state
behind: tool search adds thousands of tools to the catalog agents are offered tools from,
so it comes last. ``make soak`` is the long soak; the one here is short.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import (
    commands,
    concurrency,
    latency,
    persistence,
    retrieval,
    soak,
    throughput,
    tools,
)
from bench.mesh import PGDATA, BenchMesh, embedded_server, raise_open_file_limit, running_mesh
from bench.procs import LOOP_STEPS, loop_ms, mesh_processes, quiet
from bench.report import Figure, publish
from bench.upstream import Upstream
from services.common.heap import settle_heap

HERE = Path(__file__).resolve().parent
FULL: dict[str, Any] = {
    "token_delay_ms": 5,
    "tokens": 200,
    "ttft_samples": 300,
    "stream_levels": [1, 10, 100],
    "paced": (100, 50.0, 100),
    "concurrency": [100, 500, 1000],
    "persist_sessions": 50,
    "persist_tokens": 100,
    "long_session": 1000,
    "tool_catalogs": [1000, 10000],
    "searches": 100,
    "soak_seconds": 20,
    "soak_workers": 20,
}
QUICK: dict[str, Any] = {
    **FULL,
    "ttft_samples": 10,
    "stream_levels": [1, 10],
    "paced": (10, 50.0, 20),
    "concurrency": [10, 20],
    "persist_sessions": 5,
    "persist_tokens": 30,
    "long_session": 200,
    "tool_catalogs": [50, 100],
    "searches": 20,
    "soak_seconds": 5,
    "soak_workers": 4,
}


def _levels(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; unset flags keep the profile's value (see ``knobs``)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument(
        "--token-delay-ms",
        type=int,
        help=f"model pace, ms/token (default {FULL['token_delay_ms']})",
    )
    parser.add_argument(
        "--tokens", type=int, help=f"tokens per streamed answer (default {FULL['tokens']})"
    )
    parser.add_argument(
        "--ttft-samples", type=int, help=f"samples per TTFT path (default {FULL['ttft_samples']})"
    )
    parser.add_argument("--stream-levels", type=_levels, help="e.g. 1,10,100,1000")
    parser.add_argument("--concurrency", type=_levels, help="e.g. 100,500,1000")
    parser.add_argument("--tool-catalogs", type=_levels, help="e.g. 1000,10000")
    parser.add_argument(
        "--soak-seconds", type=float, help=f"the short soak (default {FULL['soak_seconds']})"
    )
    parser.add_argument(
        "--no-single-agent", action="store_true", help="skip the MULTI_AGENT_MODE=false mesh"
    )
    parser.add_argument("--results-dir", type=Path, default=HERE / "results")
    parser.add_argument(
        "--latest", type=Path, help="where to write the table (full runs: bench/LATEST.md)"
    )
    return parser.parse_args(argv)


def knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the profile, overridden by explicit flags."""
    chosen = dict(QUICK if args.quick else FULL)
    flags = ("token_delay_ms", "tokens", "ttft_samples", "stream_levels", "concurrency")
    for key in (*flags, "tool_catalogs"):
        if getattr(args, key) is not None:
            chosen[key] = getattr(args, key)
    if args.soak_seconds is not None:
        chosen["soak_seconds"] = args.soak_seconds
    chosen["single_agent_mesh"] = not args.no_single_agent
    return chosen


@contextlib.asynccontextmanager
async def maybe_single(dsn: str, wanted: bool, pace: int) -> AsyncIterator[BenchMesh | None]:
    """The MULTI_AGENT_MODE=false mesh when wanted, else None."""
    if not wanted:
        yield None
        return
    async with running_mesh(dsn, token_delay_ms=pace, multi_agent=False) as mesh:
        yield mesh


async def settle(processes: dict[str, list[int]], single: BenchMesh | None) -> None:
    """First tokens are measured once both meshes are idle (``procs.quiet``)."""
    listed = dict(processes)
    if single is not None:
        for name, pids in mesh_processes(single.process.pid, None).items():
            listed[f"single-agent {name}"] = pids
    started = time.perf_counter()
    settled = await quiet(listed)
    waited = f"{time.perf_counter() - started:.1f} s"
    state = "idle after" if settled else "still busy after"
    print(f"bench: the meshes were {state} {waited}", file=sys.stderr, flush=True)


class Sections:
    """Runs sections one after another, timing each; a broken one becomes an "error" row,
    the others still report, and the exit code says something failed."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.figures: list[Figure] = []
        self.timings: dict[str, float] = {}
        self.speeds: dict[str, float] = {}
        """The box's speed (``procs.loop_ms``) as each section started, and at the end."""

    async def run(self, name: str, work: Callable[[], Awaitable[list[Figure]]]) -> None:
        """Run ``work`` (called only now, so each section starts after the last one)."""
        # Progress goes to stderr: stdout carries only the table.
        self.speeds[name] = loop_ms()
        print(f"bench: {name} ... (box: {self.speeds[name]} ms)", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            # The scripted model logs every request it serves (for tests): start each
            # section without the previous one's log in its memory.
            await self.upstream.forget_requests()
            self.figures += await work()
        except Exception as failure:  # any failure: reported in the table, then exit 1
            traceback.print_exc()
            self.figures.append(
                Figure(name, "error", f"{type(failure).__name__}: {failure}"[:200], "")
            )
        self.timings[name] = round(time.perf_counter() - started, 1)
        print(f"bench: {name} took {self.timings[name]} s", file=sys.stderr, flush=True)


async def run(k: dict[str, Any]) -> tuple[Sections, dict[str, tuple[int, str]]]:
    """Every section against one mesh (plus the single-agent one for TTFT)."""
    pace = int(k["token_delay_ms"])
    async with embedded_server() as server, running_mesh(server.dsn, token_delay_ms=pace) as mesh:
        processes = mesh_processes(mesh.process.pid, PGDATA)
        upstream = Upstream(mesh.model)
        sections = Sections(upstream)
        gateway = mesh.gateway
        try:
            async with maybe_single(server.dsn, k["single_agent_mesh"], pace) as single:
                await settle(processes, single)
                await sections.run(
                    "time to first token",
                    lambda: latency.measure(mesh, single, upstream, k["ttft_samples"]),
                )
            await sections.run(
                "streaming throughput",
                lambda: throughput.measure(
                    gateway, upstream, processes, k["stream_levels"], k["tokens"], k["paced"]
                ),
            )
            await sections.run(
                "concurrency",
                lambda: concurrency.measure(gateway, upstream, processes, k["concurrency"]),
            )
            await sections.run(
                "persistence",
                lambda: persistence.measure(
                    mesh, upstream, k["persist_sessions"], k["persist_tokens"], k["long_session"]
                ),
            )
            await sections.run(
                "soak",
                lambda: soak.run_soak(
                    gateway, upstream, processes, k["soak_seconds"], k["soak_workers"], pace
                ),
            )
            await sections.run(
                "tool search", lambda: tools.measure(mesh, k["tool_catalogs"], k["searches"])
            )
            await sections.run("command policy", commands.measure)
            await sections.run("tool retrieval", lambda: retrieval.measure(server.dsn))
            sections.speeds["end"] = loop_ms()
        finally:
            await upstream.close()
    problems = mesh.problems.most_common(20)
    return sections, {name: (count, mesh.first_fields[name]) for name, count in problems}


async def main(argv: list[str] | None = None) -> int:
    """Run the suite, publish the table and JSON; 1 when a section broke, else 0."""
    args = parse(argv)
    k = knobs(args)
    raise_open_file_limit()
    settle_heap()  # the client's own collector pauses would land in the figures it times
    started = time.perf_counter()
    sections, problems = await run(k)
    figures = sections.figures
    for problem, (count, first) in problems.items():
        print(f"bench: mesh logged {count} x {problem} (the first: {first})", file=sys.stderr)
    settings = {
        "SCRIPTED_MODEL_TOKEN_DELAY_MS": k["token_delay_ms"],
        "MULTI_AGENT_MODE": "true (one TTFT row: false)" if k["single_agent_mesh"] else "true",
        "unpaced answer tokens": k["tokens"],
        "paced sessions, tokens/s, tokens": k["paced"],
        "TTFT samples/path": k["ttft_samples"],
        "profile": "quick" if args.quick else "full",
        "wall s": round(time.perf_counter() - started),
    }
    latest = (
        args.latest if args.latest is not None else (None if args.quick else HERE / "LATEST.md")
    )
    settings["seconds per section"] = sections.timings
    settings[f"box speed, ms for {LOOP_STEPS:,} Python loop steps before each section"] = (
        sections.speeds
    )
    extra = {"mesh_log_problems": {name: count for name, (count, _) in problems.items()}}
    publish(figures, settings, args.results_dir, latest, extra=extra)
    return 1 if any(f.name == "error" for f in figures) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
