"""When this replica takes a session and when it lets it go.

A session is taken when a stream attaches to it here, beside the attach's own check, so
the stream's first message finds it owned (the lease and the take-over read, one round
trip, no longer come before a first token), or when a message for it arrives and it is
not owned. It is let go when no stream of it is attached here and no worker
runs it. One take per session at a time: everyone who needs it waits for the same one
(a session lock is counted, so two takes would need two releases).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from services.orchestrator.session.ownership import Ownership

log = logging.getLogger(__name__)


class Leases:
    """Takes sessions once, counts the streams attached here, lets go of the idle ones."""

    def __init__(
        self,
        ownership: Ownership,
        take: Callable[[str], Coroutine[Any, Any, bool]],
        working: Callable[[str], bool],
    ) -> None:
        self.ownership = ownership
        self._take = take
        """Take the lease (False: another live replica owns the session) and recover what
        the last owner left."""
        self._working = working
        """Whether a worker runs the session here (it lets go itself when it ends)."""
        self._taking: dict[str, asyncio.Task[bool]] = {}
        self._streams: collections.Counter[str] = collections.Counter()

    async def own(self, sid: str) -> bool:
        """Own ``sid`` (True) unless another live replica does; the first owner here
        recovers what the last one left."""
        taking = self._taking.get(sid)
        if taking is None:
            if sid in self.ownership.owned:  # and recovered: a take in flight is waited for
                return True
            taking = self._start(sid)
        return await asyncio.shield(taking)

    def _start(self, sid: str) -> asyncio.Task[bool]:
        taking = self._taking[sid] = asyncio.create_task(self._take(sid), name=f"take:{sid}")
        taking.add_done_callback(lambda done: self._done(sid, done))
        return taking

    def _done(self, sid: str, task: asyncio.Task[bool]) -> None:
        if self._taking.get(sid) is task:
            del self._taking[sid]
        if not task.cancelled() and task.exception() is not None:
            log.debug("take of %s failed", sid, exc_info=task.exception())

    def attached(self, sid: str) -> None:
        """A stream of ``sid`` attached here: take the session beside the attach (its
        statement leaves in the loop's next turn, ahead of the work the attach starts; a
        failed take is logged, and the first message takes it again or says why not)."""
        self._streams[sid] += 1
        if sid not in self.ownership.owned and sid not in self._taking:
            self._start(sid)

    async def detached(self, sid: str) -> None:
        """A stream of ``sid`` here ended (or its attach was refused)."""
        self._streams[sid] -= 1
        if self._streams[sid] <= 0:
            del self._streams[sid]
            await self.let_go(sid)

    async def let_go(self, sid: str) -> None:
        """Release ``sid`` unless a stream is attached here or a worker runs it."""
        taking = self._taking.get(sid)
        if taking is not None:
            await asyncio.wait([taking])
        if sid not in self._streams and not self._working(sid):
            await asyncio.shield(self.ownership.release(sid))
