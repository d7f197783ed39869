"""Driving sessions the way an IDE does: many sockets at once, a turn, a tool round trip.

Every helper speaks through ``clients.python.ide`` (the project's WebSocket IDE client).
A turn never raises: what went wrong is counted in ``Turn.error`` so a benchmark can
report errors next to its latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from websockets.exceptions import WebSocketException

from bench.procs import resident
from clients.python.ide import Event, IdeConnection, connect_ide, is_done, of_type

TURN_TIMEOUT = 180.0
FAILURES = (TimeoutError, OSError, ValueError, WebSocketException)
# Short on purpose: the model's follow-up quotes it, and every quoted word is one more event.
TOOL_RESULT = "print(1)"


@dataclass
class Turn:
    """What one turn looked like from the IDE."""

    tokens: int = 0
    """Upstream tokens received: the scripted model streams one word per token, and the
    runtime may join several into one event, so words are counted, not events."""
    events: int = 0
    """``assistant_message`` token events received."""
    first_token_s: float | None = None
    last_token_s: float | None = None
    seconds: float = 0.0
    error: str | None = None
    parts: tuple[float, float, float] | None = None
    """A tool turn's seconds by part, when its answer streamed: to the tool call's ``done``;
    from there (the tool result sent) to the answer's first token; the answer to its
    ``done``."""


def _words(events: Sequence[Event]) -> tuple[int, int]:
    """(tokens, token events) of a turn's events (see ``Turn.tokens``)."""
    pieces = [str(e["token"]) for e in events if _is_token(e)]
    return len("".join(pieces).split()), len(pieces)


def _problem(events: Sequence[Event], want: str) -> str | None:
    errors = of_type(list(events), "error")
    if errors:
        return f"error event {errors[0].get('error_code')}: {errors[0].get('content')}"
    status = events[-1].get("status") if events else None
    return None if status == want else f"done with status {status!r}, expected {want!r}"


def _is_token(event: Event) -> bool:
    return event.get("type") == "assistant_message" and bool(event.get("token"))


async def streamed_turn(ide: IdeConnection, content: str, agent_type: str | None = None) -> Turn:
    """Send a user message, count streamed tokens until ``done``; time the first one."""
    turn = Turn()
    started = time.perf_counter()
    try:
        await ide.user_message(content, agent_type=agent_type)
        async with asyncio.timeout(TURN_TIMEOUT):
            events: list[Event] = []
            while True:
                event = await ide.next_event(None)
                events.append(event)
                if _is_token(event):
                    turn.last_token_s = time.perf_counter() - started
                    if turn.first_token_s is None:
                        turn.first_token_s = turn.last_token_s
                if event.get("type") == "done":
                    break
        turn.tokens, turn.events = _words(events)
        turn.error = _problem(events, "completed")
    except FAILURES as failure:
        turn.error = f"{type(failure).__name__}: {failure}"
    turn.seconds = time.perf_counter() - started
    return turn


def pace(tokens: int, first_s: float | None, last_s: float | None) -> float | None:
    """Tokens per second between the first token and the last (None under two tokens):
    the streaming rate, apart from the fixed cost of starting and ending a turn."""
    if first_s is None or last_s is None or tokens < 2 or last_s <= first_s:
        return None
    return (tokens - 1) / (last_s - first_s)


async def tool_turn(ide: IdeConnection, content: str) -> Turn:
    """A turn with one tool round trip: the model calls read_file, the IDE answers."""
    turn = Turn()
    started = time.perf_counter()
    try:
        await ide.user_message(content, agent_type="coder")
        first = await ide.until_done(TURN_TIMEOUT)
        calls = of_type(first, "tool_call")
        turn.error = _problem(first, "awaiting_tool_result")
        called = time.perf_counter()
        if turn.error is None and calls:
            await ide.tool_result(str(calls[0]["call_id"]), TOOL_RESULT)
            second = await ide.until(lambda e: _is_token(e) or is_done(e), TURN_TIMEOUT)
            answered = time.perf_counter()
            if not is_done(second[-1]):
                second += await ide.until_done(TURN_TIMEOUT)
                ended = time.perf_counter()
                turn.parts = (called - started, answered - called, ended - answered)
            turn.tokens, turn.events = _words(second)
            turn.error = _problem(second, "completed")
        elif turn.error is None:
            turn.error = "no tool_call before done"
    except FAILURES as failure:
        turn.error = f"{type(failure).__name__}: {failure}"
    turn.seconds = time.perf_counter() - started
    return turn


async def open_many(
    base_url: str, session_ids: Sequence[str], batch: int = 50
) -> tuple[list[IdeConnection], list[str]]:
    """One socket per session, ``batch`` handshakes at a time: (the open ones, why the
    others failed). A burst of 1,000 handshakes would measure the accept queue instead
    of the runtime; a refused one is an error to report, not a reason to stop."""

    async def one(session_id: str) -> IdeConnection | str:
        try:
            return await connect_ide(base_url, session_id)
        except FAILURES as failure:
            return f"connect {session_id}: {type(failure).__name__}: {failure}"

    opened: list[IdeConnection] = []
    failures: list[str] = []
    for start in range(0, len(session_ids), batch):
        for result in await asyncio.gather(*map(one, session_ids[start : start + batch])):
            if isinstance(result, str):
                failures.append(result)
            else:
                opened.append(result)
    return opened, failures


async def close_many(connections: Sequence[IdeConnection]) -> None:
    """Close every socket; one already gone does not stop the others."""

    async def close(ide: IdeConnection) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            await ide.close()

    await asyncio.gather(*(close(ide) for ide in connections))


class PeakMemory:
    """Samples every process's resident memory in the background and keeps the peak.

    Once a second: a sample reads each Postgres backend's ``smaps_rollup`` (the kernel
    walks its page tables, ~0.3 ms a backend at rest, more under load) on the cores the
    mesh is measured on; four a second cost the 100-session live pass 0.5 of its ~10 CPU s."""

    def __init__(self, processes: Mapping[str, list[int]], every: float = 1.0) -> None:
        self.processes = processes
        self.every = every
        self.peak: dict[str, int] = resident(processes)
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        """Read every process once and keep the highs: also called by a level when all its
        turns are done, so a level shorter than ``every`` is still sampled with its
        sessions live."""
        for name, kib in resident(self.processes).items():
            self.peak[name] = max(self.peak.get(name, 0), kib)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            self.sample()

    async def __aenter__(self) -> PeakMemory:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
