"""Persistence: how fast events are committed, and how long a long session takes to come back.

Every event the IDE sees is committed to Postgres before it is sent, so streaming at 0 ms
per token measures the commit path itself. The long session (1,000 messages and the events
an IDE would have seen for them) is written straight into the orchestrator's tables, then
loaded (``GetHistory``), replayed over a WebSocket from ``last_event_id=0``, and continued.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import time
import uuid

import aiohttp
import asyncpg
import orjson

from bench.latency import MARKER as TTFT_MARKER
from bench.latency import ttft_scenario
from bench.mesh import BenchMesh
from bench.report import Figure, first_error, num
from bench.sessions import close_many, open_many, streamed_turn
from bench.upstream import Upstream, words
from clients.python.ide import connect_ide, ws_url
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.orchestrator.state import events
from services.orchestrator.turn.tokens import message_tokens

SECTION = "Persistence"
MARKER = "bench-persist"
ANSWER_TOKENS = 20
REPEATS = 5


async def events_per_second(
    mesh: BenchMesh, upstream: Upstream, sessions: int, tokens: int
) -> Figure:
    """Rows added to orchestrator.events per second while ``sessions`` stream at full speed."""
    await upstream.enqueue(
        [{"match": MARKER, "text": words(tokens), "token_delay_ms": 0, "repeat": True}]
    )
    conn = await asyncpg.connect(mesh.database_url)
    try:
        ids = [f"persist-{i}" for i in range(sessions)]
        sockets, refused = await open_many(mesh.gateway, ids)
        try:
            before = await conn.fetchval("select count(*) from orchestrator.events")
            started = time.perf_counter()
            turns = await asyncio.gather(
                *(streamed_turn(ide, f"{MARKER} {i}", "coder") for i, ide in enumerate(sockets))
            )
            seconds = time.perf_counter() - started
            after = await conn.fetchval("select count(*) from orchestrator.events")
        finally:
            await close_many(sockets)
    finally:
        await conn.close()
    committed = int(after) - int(before)
    failures = [*refused, *(t.error for t in turns if t.error)]
    carried = sum(t.tokens for t in turns)
    # Tokens that arrive while a commit is in flight share one event: both rates matter.
    value = f"{num(committed / seconds, 0)} (carrying {num(carried / seconds, 0)} tokens/s)"
    if failures:
        value += f", {len(failures)} errors{first_error(failures)}"
    name = f"events committed ({sessions} sessions streaming {tokens} tokens at 0 ms/token)"
    data = {"events": committed, "tokens": carried, "seconds": seconds, "errors": len(failures)}
    return Figure(SECTION, name, value, "events/s", data)


def token_event(token: str, message_id: str) -> pb.ServerEvent:
    """One streamed token as the runtime stores it (one word per event: the worst case)."""
    return pb.ServerEvent(
        assistant_message=pb.AssistantMessage(
            token=token, is_final=False, agent="coder", message_id=message_id
        )
    )


async def write_long_session(dsn: str, session_id: str, messages: int, agent: str) -> int:
    """A session of ``messages`` messages (user/assistant alternating) with the events the
    IDE saw for each answer (its tokens, the final marker, ``done``); returns the last seq."""
    rows: list[tuple[str, int, str, bytes]] = []
    seq = 0
    for _ in range(messages // 2):
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        answer = [token_event(w + " ", message_id) for w in words(20).split()]
        for event in [*answer, events.assistant_final("coder", message_id), events.done()]:
            seq += 1
            event.session_id, event.seq = session_id, seq
            event.timestamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
            rows.append((session_id, seq, events.kind(event), event.SerializeToString()))
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "insert into orchestrator.sessions (session_id, current_agent) values ($1, $2)",
                session_id,
                agent,
            )
            # Counted as the runtime counts them when it writes: the budget check before
            # the resumed turn's call is then the sum it is in production, not a re-count.
            content = words(ANSWER_TOKENS)  # the same text in every message
            tokens = message_tokens(content)
            await conn.copy_records_to_table(
                "messages",
                schema_name="orchestrator",
                columns=["session_id", "role", "content", "tokens"],
                records=[
                    (session_id, "user" if i % 2 == 0 else "assistant", content, tokens)
                    for i in range(messages)
                ],
            )
            await conn.copy_records_to_table(
                "events",
                schema_name="orchestrator",
                columns=["session_id", "seq", "type", "event"],
                records=rows,
            )
    finally:
        await conn.close()
    return seq


async def replay_ms(gateway: str, session_id: str, last: int) -> float:
    """Milliseconds from opening a socket at ``last_event_id=0`` to the event ``last``,
    through the project's IDE client (``websockets``)."""
    started = time.perf_counter()
    ide = await connect_ide(gateway, session_id, last_event_id=0)
    try:
        await ide.until(lambda e: int(e.get("seq", 0)) >= last, seconds=120)
        return (time.perf_counter() - started) * 1000
    finally:
        await ide.close()


async def lean_replay_ms(
    http: aiohttp.ClientSession, gateway: str, session_id: str, last: int
) -> float:
    """``replay_ms`` through aiohttp's WebSocket client, whose frame reader is compiled: on
    two shared cores a client's own parsing competes with the gateway's sending, so the
    difference between the two is the client's share of the figure."""
    started = time.perf_counter()
    url = ws_url(gateway, session_id, last_event_id=0)
    async with asyncio.timeout(120), http.ws_connect(url, max_msg_size=0) as ws:
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"the replay ended early: {frame.type.name}")
            if int(orjson.loads(frame.data).get("seq", 0)) >= last:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("the replay ended before its last event")


async def resume(mesh: BenchMesh, upstream: Upstream, messages: int) -> list[Figure]:
    """Load, replay and continue a session of ``messages`` messages."""
    session_id = f"long-{uuid.uuid4().hex[:8]}"
    agent = "orchestrator" if mesh.multi_agent else "universal"
    last = await write_long_session(mesh.database_url, session_id, messages, agent)
    client = mesh.client()
    loads: list[float] = []
    replays: list[float] = []
    lean: list[float] = []
    try:
        for _ in range(REPEATS):
            started = time.perf_counter()
            history = await client.runtime.GetHistory(
                runtime_pb2.GetHistoryRequest(session_id=session_id)
            )
            loads.append((time.perf_counter() - started) * 1000)
        async with aiohttp.ClientSession() as http:
            for _ in range(REPEATS):  # alternating, so a slow moment hits both clients
                replays.append(await replay_ms(mesh.gateway, session_id, last))
                lean.append(await lean_replay_ms(http, mesh.gateway, session_id, last))
        await upstream.enqueue([ttft_scenario()])
        ide = await connect_ide(mesh.gateway, session_id)
        try:
            turns = [
                await streamed_turn(ide, f"{TTFT_MARKER} resumed {n}", "coder")
                for n in range(REPEATS)
            ]
        finally:
            await ide.close()
    finally:
        await client.close()
    count = len(history.messages)
    firsts = [t.first_token_s * 1000 for t in turns if t.first_token_s is not None]
    first = statistics.median(firsts) if firsts else float("nan")
    error = next((t.error for t in turns if t.error), None)
    return [
        Figure(
            SECTION,
            f"load a {count:,}-message session (GetHistory), median of {REPEATS}",
            num(statistics.median(loads)),
            "ms",
            {"samples": loads, "messages": count},
        ),
        Figure(
            SECTION,
            f"resume over WebSocket: replay {last:,} events from last_event_id=0, median",
            num(statistics.median(replays)),
            "ms",
            {"samples": replays, "events": last},
            "<= 200 ms at 11,000",
        ),
        Figure(
            SECTION,
            "the same replay through aiohttp's client (a compiled frame reader), median",
            num(statistics.median(lean)),
            "ms",
            {"samples": lean, "events": last},
        ),
        Figure(
            SECTION,
            f"first token of the next turn ({count:,}-message history), median of {REPEATS}",
            num(first) + (f", error: {error}" if error else ""),
            "ms",
            {"samples": firsts, "error": error},
            "<= 50 ms",
        ),
    ]


async def measure(
    mesh: BenchMesh, upstream: Upstream, sessions: int, tokens: int, messages: int
) -> list[Figure]:
    """The commit rate, then the long session's load, replay and next turn."""
    return [
        await events_per_second(mesh, upstream, sessions, tokens),
        *await resume(mesh, upstream, messages),
    ]
