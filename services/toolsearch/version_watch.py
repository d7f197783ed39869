"""The catalog's version, read once per change instead of before every search.

A search must see the catalog as of its start (read-your-writes for this process's own
imports, and another replica's import once it committed). Reading ``catalog_state``
before each search did that at the cost of a statement per search. Instead one connection
outside the pool LISTENs to ``toolsearch_catalog``: every bump notifies when it commits,
and so does this process's own write. A change forgets the known version; the next search
reads it, and the read is kept only when nothing changed while it ran (a read that began
before a commit may return the version before it). Nothing assumes versions only grow: a
restored database may go back. While the listener is down (not started yet, Postgres
restarted) every search reads, as before, and the listener is started again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from services.common.db import Pool, dsn_of

log = logging.getLogger(__name__)
CHANNEL = "toolsearch_catalog"
DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
Token = tuple[int, int]
"""(the listener it was taken on, the changes heard by then)."""


class VersionWatch:
    """The catalog version read since the last change heard, if any."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._conn: asyncpg.Connection | None = None
        self._listeners = 0
        self._changes = 0
        self._known: int | None = None
        self._starting: asyncio.Task[None] | None = None

    def _listening(self) -> bool:
        if self._conn is not None and not self._conn.is_closed():
            return True
        self._known = None
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._listen())
        return False

    def known(self) -> int | None:
        """The current version, or None: read it (``reading`` first, then ``read``)."""
        return self._known if self._listening() else None

    def reading(self) -> Token | None:
        """Taken before a read of the version; None: the read cannot be kept."""
        return (self._listeners, self._changes) if self._listening() else None

    def read(self, version: int, token: Token | None) -> None:
        """``version`` was read after ``token``: known, unless something changed since."""
        if token is not None and token == (self._listeners, self._changes) and self._listening():
            self._known = version

    def changed(self) -> None:
        """The catalog moved (a notification, or this process's own commit)."""
        self._changes += 1
        self._known = None

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.changed()

    async def _listen(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(dsn_of(self.pool))
            await conn.add_listener(CHANNEL, self._notified)
        except DB_ERRORS as error:
            log.warning("catalog version not followed: %s", error)
            if conn is not None:
                conn.terminate()
            return
        self._conn = conn
        self._listeners += 1  # reads begun before it heard nothing: not kept

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
