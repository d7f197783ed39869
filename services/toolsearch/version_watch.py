"""The catalog's version, followed by notification instead of read before every search.

A search must see the catalog as of its start (read-your-writes for this process's own
imports, and another replica's import once it committed). Reading ``catalog_state``
before each search did that at the cost of a statement per search; instead one
connection outside the pool LISTENs to ``toolsearch_catalog`` (every bump notifies with
the new version, delivered when it commits), and this process's own writes are known when
they commit. Versions only grow, so the highest seen wins. While the listener is down
(not started yet, Postgres restarted) ``known`` is None and the caller reads the version,
as before; the listener is started again in the background.
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


class VersionWatch:
    """The highest catalog version seen while listening."""

    def __init__(self, pool: Pool, read: str) -> None:
        self.pool = pool
        self.read = read
        """The statement that reads the version."""
        self._conn: asyncpg.Connection | None = None
        self._known: int | None = None
        self._seen = 0
        self._starting: asyncio.Task[None] | None = None

    def known(self) -> int | None:
        """The current version while the listener is up; None: read it (and the listener
        is being started)."""
        if self._conn is None or self._conn.is_closed():
            self._known = None
            if self._starting is None or self._starting.done():
                self._starting = asyncio.create_task(self._listen())
            return None
        return self._known

    def saw(self, version: int) -> None:
        """A version committed by this process (its notification may come later)."""
        self._note(version)

    def _note(self, version: int) -> None:
        self._seen = max(self._seen, version)
        if self._known is not None:
            self._known = max(self._known, version)

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if payload.isdigit():
            self._note(int(payload))

    async def _listen(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(dsn_of(self.pool))
            await conn.add_listener(CHANNEL, self._notified)
            # Read after listening: a bump between the two is in one or the other.
            version: int = await conn.fetchval(self.read)
        except DB_ERRORS as error:
            log.warning("catalog version not followed: %s", error)
            if conn is not None:
                conn.terminate()
            return
        self._conn = conn
        self._known = max(version, self._seen)

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
