"""Rows whose producers wait for their commit, written together by one writer per queue.

The group commit of ``SessionHub`` for any other statement that many sessions make at
once: ``put`` queues a row and waits until the statement that carries it has committed
(or failed: the error is the waiter's, as with a statement of its own). While one write is
in flight the next rows gather, and the writer then writes them all in one call; a lone
row is written at once. A busy process makes one statement for many sessions' rows, and
an idle one makes the statement it always made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class GroupWrite(Generic[T]):
    """A queue of ``T`` whose rows ``write`` commits together; ``put`` waits for its own."""

    def __init__(self, write: Callable[[list[T]], Awaitable[None]]) -> None:
        self._write = write
        self._queued: list[tuple[T, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def put(self, row: T) -> None:
        """Queue ``row`` and wait for its commit. A cancelled waiter does not take it back:
        the write goes on with the others."""
        committed = asyncio.get_running_loop().create_future()
        self._queued.append((row, committed))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())
        await asyncio.shield(committed)

    async def _write_all(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    await self._write([row for row, _ in batch])
                except Exception as error:
                    _settle(batch, error)
                except BaseException:
                    _settle(batch, asyncio.CancelledError())  # the writer itself stopped
                    raise
                else:
                    _settle(batch, None)
        finally:
            queued, self._queued = self._queued, []
            _settle(queued, asyncio.CancelledError())


def _settle(batch: list[tuple[T, asyncio.Future[None]]], error: BaseException | None) -> None:
    """Tell every waiter of ``batch`` that is not told yet: committed (None) or ``error``."""
    for _, committed in batch:
        if committed.done():
            continue
        if error is None:
            committed.set_result(None)
        else:
            committed.set_exception(error)
            committed.exception()  # retrieved: a waiter that left logs nothing
