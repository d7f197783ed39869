"""Rows no client waits on, written behind their producer by one writer per queue.

For writes that are bookkeeping rather than a promise (the instance mirror, request
accounting, usage counters): ``put`` never waits, and one writer task writes whatever is
queued in one call, then what was queued meanwhile. The writer first waits ``linger``
(``BOOKKEEPING_LINGER``), so the rows of a moment go together and no statement of theirs
lands on the way of a turn's first token (a turn's instance row was written while its
model request was being built); with no linger a lone row is written at once. A busy
process writes many together instead of one statement each, and nobody's answer waits for
them. A write that fails is logged and its rows dropped (as a failed inline write was); a
process killed before its writer ran loses what was queued. Reads that must see this
process's own rows ``settled()`` first, which cuts the linger short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from services.common.errors import ServiceError

log = logging.getLogger(__name__)
T = TypeVar("T")
BOOKKEEPING_LINGER = 0.05
"""Seconds the bookkeeping queues gather (measured: a turn's first token 0.3-0.7 ms sooner
on every path; their rows reach other processes that much later)."""


class WriteBehind(Generic[T]):
    """A queue of ``T`` and the one writer that empties it through ``write``."""

    def __init__(
        self,
        write: Callable[[list[T]], Awaitable[None]],
        what: str,
        linger: float = BOOKKEEPING_LINGER,
    ) -> None:
        self._write = write
        self.what = what
        """What the rows are, for the log."""
        self.linger = linger
        """Seconds the writer gathers rows before it writes them."""
        self._queued: list[T] = []
        self._writer: asyncio.Task[None] | None = None
        self._now = asyncio.Event()

    def put(self, row: T) -> None:
        """Queue ``row``; the writer starts if it is not running."""
        self._queued.append(row)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())

    async def settled(self) -> None:
        """Wait until every row queued so far is written (or its write failed); the
        writer does not linger for it."""
        if self._writer is not None and not self._writer.done():
            self._now.set()
            await asyncio.shield(self._writer)

    async def _write_all(self) -> None:
        try:
            if self.linger:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.linger):
                        await self._now.wait()
            while self._queued:
                rows, self._queued = self._queued, []
                try:
                    await self._write(rows)
                except ServiceError as error:
                    log.warning("%s not written: %s", self.what, error.message)
        finally:
            # Cleared as this writer ends: a reader that came while it wrote must not take
            # the next writer's linger away.
            self._now.clear()
