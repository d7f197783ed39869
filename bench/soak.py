"""Soak: sessions opening and closing for a bounded time; each process's memory at start and end.

``python -m bench.soak --minutes N`` (``make soak``) starts its own mesh and stops by itself;
``python -m bench`` runs a short one on its mesh. ``workers`` IDEs loop: open a socket on a
new session, one turn in the default mode (routing call, then the agent's streamed answer),
close. Flat memory from "warm" to "end" means no leak; the rise from "start" to "warm" is
the orchestrator keeping an idle session's worker for a minute before letting it go.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from bench.mesh import PGDATA, embedded_server, raise_open_file_limit, running_mesh
from bench.procs import mesh_processes, snapshot
from bench.report import Figure, first_error, num, publish
from bench.sessions import FAILURES, streamed_turn
from bench.upstream import Upstream, words
from clients.python.ide import connect_ide

SECTION = "Soak"
MARKER = "bench-soak"
RESULTS = Path(__file__).resolve().parent / "results"


async def run_soak(
    gateway: str,
    upstream: Upstream,
    processes: Mapping[str, list[int]],
    seconds: float,
    workers: int,
    pace_ms: int,
) -> list[Figure]:
    """Open and close sessions for ``seconds``; report sessions, errors and memory."""
    await upstream.route_instantly()
    await upstream.enqueue(
        [{"match": MARKER, "text": words(30), "token_delay_ms": pace_ms, "repeat": True}]
    )
    started = time.perf_counter()
    samples: list[tuple[float, dict[str, int]]] = [(0.0, dict(snapshot(processes).rss_kib))]
    done, errors, first_errors = 0, 0, list[str]()

    async def worker(index: int) -> None:
        nonlocal done, errors
        turn_no = 0
        while time.perf_counter() - started < seconds:
            session_id = f"soak-{index}-{turn_no}"
            turn_no += 1
            try:
                ide = await connect_ide(gateway, session_id)
            except FAILURES as failure:
                errors += 1
                first_errors.append(f"connect: {failure}")
                await asyncio.sleep(0.5)  # a refused connection must not spin the loop
                continue
            try:
                turn = await streamed_turn(ide, f"{MARKER} {session_id}")
            finally:
                await ide.close()
            done += 1
            if turn.error:
                errors += 1
                first_errors.append(turn.error)

    async def sampler() -> None:
        every = max(1.0, seconds / 20)
        while True:
            await asyncio.sleep(every)
            # The scripted model keeps a log of every request for tests; emptied here so
            # the upstream's own bookkeeping does not pass for a leak in its memory figure.
            await upstream.forget_requests()
            now = time.perf_counter() - started
            samples.append((now, dict(snapshot(processes).rss_kib)))

    sampling = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    finally:
        sampling.cancel()
    elapsed = time.perf_counter() - started
    samples.append((elapsed, dict(snapshot(processes).rss_kib)))
    return _figures(samples, done, errors, first_errors, elapsed)


def _figures(
    samples: list[tuple[float, dict[str, int]]],
    done: int,
    errors: int,
    first_errors: list[str],
    elapsed: float,
) -> list[Figure]:
    start, end = samples[0][1], samples[-1][1]
    # "Warm": the first sample after a quarter of the run, once idle workers pile up.
    warm = next((s for t, s in samples if t >= elapsed / 4), end)
    figures = [
        Figure(
            SECTION,
            "sessions opened, answered and closed",
            f"{done:,} in {elapsed:.0f} s ({num(done / elapsed)}/s), "
            f"{errors} errors{first_error(first_errors)}",
            "sessions",
            {"sessions": done, "seconds": elapsed, "errors": errors, "first": first_errors[:3]},
        )
    ]
    for name in end:
        if name == "bench client":
            continue
        mib = [start.get(name, 0) / 1024, warm.get(name, 0) / 1024, end[name] / 1024]
        figures.append(
            Figure(
                SECTION,
                f"resident memory: {name}",
                f"start {num(mib[0])} · warm {num(mib[1])} · end {num(mib[2])} "
                f"(end - warm {mib[2] - mib[1]:+.1f})",
                "MiB",
                {"samples": [(t, s.get(name, 0)) for t, s in samples]},
            )
        )
    return figures


async def main(argv: list[str] | None = None) -> int:
    """``python -m bench.soak``: start a mesh, soak it, print the table, write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0, help="how long (default 3)")
    parser.add_argument("--workers", type=int, default=20, help="concurrent IDEs (default 20)")
    parser.add_argument("--token-delay-ms", type=int, default=5, help="model pace (default 5)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    raise_open_file_limit()
    async with (
        embedded_server() as server,
        running_mesh(server.dsn, token_delay_ms=args.token_delay_ms) as mesh,
    ):
        processes = mesh_processes(mesh.process.pid, PGDATA)
        upstream = Upstream(mesh.model)
        try:
            figures = await run_soak(
                mesh.gateway,
                upstream,
                processes,
                args.minutes * 60,
                args.workers,
                args.token_delay_ms,
            )
        finally:
            await upstream.close()
    settings = {
        "minutes": args.minutes,
        "workers": args.workers,
        "SCRIPTED_MODEL_TOKEN_DELAY_MS": args.token_delay_ms,
        "MULTI_AGENT_MODE": "true",
    }
    publish(figures, settings, args.results_dir, None, prefix="soak")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
