"""``make chaos``: sessions with tool round trips over WebSocket while random processes of
the mesh are killed with SIGKILL, then the checks that must hold whatever was killed.

The mesh runs as ``make run`` runs it (the supervisor, the embedded defaults), with the
restart back-off capped at 2 s so that the run stays within minutes. Each session is an
IDE that never gives up: it reconnects with ``last_event_id`` after any drop, resends an
unfinished message with the same ``client_message_id`` and answers every tool call it
is sent. After the kills (``--kills``, 40 by default) the mesh is healthy again and every
session takes one more turn. Then, per session (``bench/chaos_checks.py``):

- the log has no gap (seqs 1..n);
- what the IDE saw equals the log (each seq once, the same event: type and payload);
- every user message is in the history exactly once, in the order sent;
- at least one tool round trip (a tool result from the IDE applied);
- the turn after the kills completed cleanly;

and for the run: the kills asked for were made, and no line of the mesh's log shows an
unhandled exception ("Exception in ASGI application", "Task exception was never
retrieved", "Task was destroyed but it is pending").

A table goes to stdout and the JSON to ``bench/results/chaos-<time>.json``; the exit code
is 1 when a check failed. Everything is bounded by ``--minutes``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import websockets

from bench.chaos_checks import VICTIMS, Session, failed, figures, session_checks
from bench.mesh import BenchMesh, embedded_server, raise_open_file_limit, running_mesh
from bench.procs import mesh_processes
from bench.report import Figure, publish
from codelab.v1 import common_pb2 as pb
from services.gateway.event_json import event_json

RESULTS = Path(__file__).resolve().parent / "results"
TURN_SECONDS = 120.0
RECONNECT_SECONDS = 0.3


class Ide:
    """Drives one session through drops: reconnect, resend, answer."""

    def __init__(self, gateway: str, session: Session) -> None:
        self.url = gateway.replace("http://", "ws://") + f"/ws/{session.session_id}"
        self.session = session

    async def turn(self, text: str) -> str:
        """One user message to its end (``completed``, ``error``, ...), through any drop;
        ``timeout`` when it did not end within ``TURN_SECONDS``."""
        try:
            return await self._turn(text)
        except TimeoutError:
            return "timeout"

    async def _turn(self, text: str) -> str:
        cid = f"{self.session.session_id}:{len(self.session.sent)}"
        self.session.sent.append(text)
        message = {"type": "user_message", "content": text, "client_message_id": cid}
        async with asyncio.timeout(TURN_SECONDS):
            while True:
                try:
                    return await self._attempt(message)
                except (OSError, websockets.WebSocketException, TimeoutError):
                    self.session.reconnects += 1
                    await asyncio.sleep(RECONNECT_SECONDS)

    async def _attempt(self, message: dict[str, Any]) -> str:
        url = f"{self.url}?last_event_id={self.session.last_seq}"
        async with websockets.connect(url, open_timeout=5) as ws:
            await ws.send(json.dumps(message))
            answered: set[str] = set()
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 30))
                self.session.saw(event)
                seq, kind = int(event.get("seq") or 0), event["type"]
                if kind == "tool_call" and event["call_id"] not in answered:
                    answered.add(event["call_id"])
                    self.session.answered.add(event["call_id"])
                    reply = {"type": "tool_result", "call_id": event["call_id"], "result": "ok"}
                    await ws.send(json.dumps(reply))
                elif kind == "error" and not seq:
                    raise OSError(event.get("error_code"))  # the mesh is away: retry
                elif kind == "done" and event["status"] in {"completed", "error", "cancelled"}:
                    return str(event["status"])

    async def catch_up(self, quiet: float = 1.0) -> None:
        """Receive whatever was committed after the last turn (a late ``duplicate``)."""
        url = f"{self.url}?last_event_id={self.session.last_seq}"
        async with websockets.connect(url, open_timeout=5) as ws:
            try:
                while True:
                    self.session.saw(json.loads(await asyncio.wait_for(ws.recv(), quiet)))
            except TimeoutError:
                return


async def healthy(gateway: str, seconds: float) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=3) as http:
        async with asyncio.timeout(seconds):
            while True:
                try:
                    if (await http.get("/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)


async def killer(mesh: BenchMesh, kills: int, rng: random.Random, log: list[str]) -> None:
    """SIGKILL a random live mesh process, one to three seconds apart, until ``kills`` were
    made; at most twice as many tries (a try finds nothing when every victim is restarting),
    so the report may show fewer, and fails then."""
    for _ in range(2 * kills):
        if len(log) >= kills:
            return
        await asyncio.sleep(rng.uniform(1.0, 3.0))
        processes = mesh_processes(mesh.process.pid, None)
        name = rng.choice([n for n in VICTIMS if processes.get(n)] or ["none"])
        if name == "none":
            continue
        try:
            os.kill(processes[name][0], signal.SIGKILL)
            log.append(name)
        except ProcessLookupError:
            continue


async def drive(ide: Ide, stop: asyncio.Event) -> None:
    while not stop.is_set():
        n = len(ide.session.sent)
        ide.session.outcomes.append(await ide.turn(f"turn {n}: please read main.py"))


async def check(dsn: str, session: Session) -> dict[str, Any]:
    """The checks of one session against Postgres."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "select seq, event from orchestrator.events where session_id = $1 order by seq",
            session.session_id,
        )
        users = await conn.fetch(
            "select content from orchestrator.messages where session_id = $1 and role = 'user'"
            " order by id",
            session.session_id,
        )
        round_trips = await conn.fetchval(
            "select count(*) from orchestrator.tool_calls"
            " where session_id = $1 and call_id = any($2) and state = 'completed'",
            session.session_id,
            sorted(session.answered),
        )
    finally:
        await conn.close()
    logged = {int(r["seq"]): event_json(pb.ServerEvent.FromString(bytes(r["event"]))) for r in rows}
    return session_checks(session, logged, [r["content"] for r in users], int(round_trips))


async def run(mesh: BenchMesh, sessions: int, kills: int, seed: int) -> list[Figure]:
    rng = random.Random(seed)
    ides = [Ide(mesh.gateway, Session(f"chaos-{seed}-{i}")) for i in range(sessions)]
    stop = asyncio.Event()
    killed: list[str] = []
    drivers = [asyncio.create_task(drive(ide, stop)) for ide in ides]
    started = time.monotonic()
    await killer(mesh, kills, rng, killed)
    stop.set()
    await asyncio.gather(*drivers)
    await healthy(mesh.gateway, 120)
    for ide in ides:
        ide.session.final = await ide.turn("after the storm: please read main.py")
        await ide.catch_up()
    elapsed = time.monotonic() - started
    results = {ide.session.session_id: await check(mesh.database_url, ide.session) for ide in ides}
    return figures(results, killed, kills, elapsed, mesh.unhandled)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--kills", type=int, default=40, help="SIGKILLs (default 40)")
    parser.add_argument("--sessions", type=int, default=4, help="IDEs (default 4)")
    parser.add_argument("--seed", type=int, default=15, help="random seed (default 15)")
    parser.add_argument("--minutes", type=float, default=15.0, help="hard limit (default 15)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    raise_open_file_limit()
    extra = {"SUPERVISOR_BACKOFF_MAX": "2", "SCRIPTED_MODEL_TOKEN_DELAY_MS": "5"}
    async with (
        embedded_server() as server,
        running_mesh(server.dsn, token_delay_ms=5, extra_env=extra) as mesh,
    ):
        async with asyncio.timeout(args.minutes * 60):
            found = await run(mesh, args.sessions, args.kills, args.seed)
    settings = {"kills": args.kills, "sessions": args.sessions, "seed": args.seed, **extra}
    publish(found, settings, args.results_dir, None, prefix="chaos")
    return 1 if failed(found) else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
