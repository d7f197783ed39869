"""``python -m bench.profile``: where a streamed turn spends its CPU, per process.

Starts the mesh as ``make bench`` does, streams unpaced answers over WebSockets for a
while, and samples every service with py-spy (``pip install py-spy``; root or
``ptrace_scope`` 0) meanwhile. Prints, per process, the functions with the most samples
on-CPU (self) and below them (total), and writes py-spy's collapsed stacks to
``bench/results/profile-<service>.txt`` for a flame graph. Profile before optimising:
the figures of ``docs/decisions.md`` come from here.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import sys
import time
from pathlib import Path

from bench.concurrency import tool_scenario
from bench.mesh import PGDATA, embedded_server, raise_open_file_limit, running_mesh
from bench.procs import cpu_delta, mesh_processes, snapshot
from bench.sessions import Turn, close_many, open_many, streamed_turn, tool_turn
from bench.upstream import Upstream, words

HERE = Path(__file__).resolve().parent
MARKER = "bench-profile"
SKIP = ("postgres", "scripted_model")
NATIVE = bool(os.environ.get("PROFILE_NATIVE"))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="sampling time")
    parser.add_argument("--sessions", type=int, default=1, help="sessions streaming at once")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per answer")
    parser.add_argument("--pace-ms", type=int, default=0, help="upstream ms per token")
    parser.add_argument("--top", type=int, default=25, help="functions listed per process")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--no-spy", action="store_true", help="CPU figures only, no sampling")
    parser.add_argument(
        "--tool", action="store_true", help="turns with a tool round trip instead of streaming"
    )
    return parser.parse_args(argv)


def summarise(collapsed: Path, top: int) -> str:
    """Self and total sample shares per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        return "  (no samples)"
    lines = [f"  {samples} samples"]
    lines += [f"  self {100 * n / samples:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += [f"  total {100 * n / samples:5.1f}%  {f}" for f, n in total.most_common(top)]
    return "\n".join(lines)


async def record(pid: int, seconds: float, out: Path) -> asyncio.subprocess.Process:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return await asyncio.create_subprocess_exec(
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--rate",
        "250",
        "--format",
        "raw",
        *(["--native"] if NATIVE else ["--nonblocking", "--gil"]),
        "--output",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def drive(
    gateway: str, sessions: int, until: float, upstream: Upstream | None = None
) -> tuple[int, int, int]:
    """Turns on ``sessions`` sockets until ``until``; (turns, tokens, events). With an
    ``upstream``, each turn is a tool round trip queued on it; else a streamed answer."""
    sockets, _ = await open_many(gateway, [f"profile-{i}" for i in range(sessions)])
    turns = tokens = events = 0

    async def take(index: int) -> Turn:
        if upstream is None:
            return await streamed_turn(sockets[index], f"{MARKER} {turns}", "coder")
        key = f"{sockets[index].session_id}-{time.monotonic_ns()}"
        await upstream.enqueue([tool_scenario(key)])
        return await tool_turn(sockets[index], f"{MARKER} [{key}] read main.py")

    async def one(index: int) -> None:
        nonlocal turns, tokens, events
        while time.monotonic() < until:
            turn = await take(index)
            turns += 1
            tokens += turn.tokens
            events += turn.events

    try:
        await asyncio.gather(*(one(i) for i in range(len(sockets))))
    finally:
        await close_many(sockets)
    return turns, tokens, events


async def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    raise_open_file_limit()
    args.out.mkdir(parents=True, exist_ok=True)
    async with (
        embedded_server() as server,
        running_mesh(server.dsn, token_delay_ms=args.pace_ms) as mesh,
    ):
        upstream = Upstream(mesh.model)
        scenario = {
            "match": MARKER,
            "text": words(args.tokens),
            "token_delay_ms": args.pace_ms,
            "repeat": True,
        }
        await upstream.enqueue([scenario])
        tools = upstream if args.tool else None
        await drive(mesh.gateway, args.sessions, time.monotonic() + 2, tools)  # warm up
        processes = mesh_processes(mesh.process.pid, PGDATA)
        targets = {n: pids[0] for n, pids in processes.items() if n not in SKIP}
        files = {n: args.out / f"profile-{n}.txt" for n in targets}
        recorders = (
            []
            if args.no_spy
            else [await record(pid, args.seconds, files[n]) for n, pid in targets.items()]
        )
        before = snapshot(processes)
        turns, tokens, events = await drive(
            mesh.gateway, args.sessions, time.monotonic() + args.seconds, tools
        )
        spent = cpu_delta(before, snapshot(processes))
        for recorder in recorders:
            await recorder.wait()
        await upstream.close()
    print(f"{turns} turns, {tokens} tokens in {events} events, {args.seconds:g} s")
    unit, count = ("turns", turns) if args.tool else ("tokens", tokens)
    print(f"{count / args.seconds:.0f} {unit}/s; CPU s per 1k {unit} (py-spy included):")
    for name, cpu in sorted(spent.items()):
        print(f"  {name:15} {cpu / max(count, 1) * 1000:.3f}")
    for name, path in files.items() if not args.no_spy else ():
        print(f"\n== {name}")
        print(summarise(path, args.top) if path.exists() else "  (py-spy wrote nothing)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
