"""Which replica owns a session, and how the others reach it.

Ownership is a Postgres advisory lock held on one connection per replica: a replica
that dies drops its connection and with it every lease, so another replica can take
the sessions over at once. A replica that is not the owner hands a message over
through the ``inbox`` table and a NOTIFY; events travel the other way as NOTIFYs
that tell a replica's subscribers to read the committed log, sent only while another
replica may be alive (presence.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool, db_errors, dsn_of
from services.orchestrator.session.presence import Presence
from services.orchestrator.state.store import QUERIES

log = logging.getLogger(__name__)

# One lock space per session id; 7 is an arbitrary seed shared by every replica (and by
# take_session, migration 0016, which takes the lock).
UNLOCK_SQL = "select pg_advisory_unlock(hashtextextended($1, 7))"
TAKE_SQL = "select got, turn_state, posted, last_seq from orchestrator.take_session($1)"
Deliver = Callable[[str, str, pb.ClientMessage], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Left:
    """What a session's last owner left, read once its lease is held."""

    turn_state: str | None
    """Its turn's state (None: no such session yet)."""
    posted: bool
    """Messages wait in its inbox."""
    last_seq: int
    """The last seq of its log (0 without events): its events go on from there."""


class Ownership:
    """Leases, the inbox and the notification listener of one replica."""

    def __init__(self, pool: Pool, presence: Presence | None = None) -> None:
        self.pool = pool
        self.presence = presence or Presence(pool)
        self.owned: set[str] = set()
        self._conn: asyncpg.Connection | None = None
        self._listener: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self.on_inbox: Callable[[str], None] = lambda sid: None
        self.on_events: Callable[[str, int], None] = lambda sid, seq: None

    async def start(self) -> None:
        await self.ensure()

    async def ensure(self) -> None:
        """(Re)open the lease and listener connections, e.g. after Postgres restarted.

        A lost lease connection lost every lease with it, so ``owned`` starts empty.
        """
        async with self._lock:
            joined = True
            if self._conn is None or self._conn.is_closed():
                self.owned.clear()
                self._conn = await self._connect(self._conn)
                joined = False
            if self._listener is None or self._listener.is_closed():
                self._listener = await self._connect(self._listener)
                await self._listener.add_listener("codelab_inbox", self._inbox_notified)
                await self._listener.add_listener("codelab_events", self._events_notified)
                joined = False
            if not joined:  # (again: joins told while a connection was away went unheard)
                await self.presence.join(self._conn, self._listener)

    async def _connect(self, old: asyncpg.Connection | None) -> asyncpg.Connection:
        # Outside the pool: these connections carry state (leases, LISTEN) that must
        # never be handed to other work, and closing one drops its leases at once.
        if old is not None:
            old.terminate()
        async with db_errors("connect", "DB_CONNECTION_ERROR"):
            conn: asyncpg.Connection = await asyncpg.connect(dsn_of(self.pool))
        return conn

    def _inbox_notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.on_inbox(payload)

    def _events_notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        sid, _, seq = payload.rpartition(" ")
        if seq.isdigit():
            self.on_events(sid, int(seq))

    async def alive(self) -> bool:
        """Both connections open (a lost lease connection means lost leases)."""
        return bool(
            self._conn
            and not self._conn.is_closed()
            and self._listener
            and not self._listener.is_closed()
        )

    async def take(self, session_id: str) -> Left | None:
        """Own ``session_id`` and read what its last owner left, in one round trip
        (migration 0016: the read follows the lock); None when another live replica
        owns it. Advisory locks count: a second take needs a second release (Leases takes
        each session once)."""
        await self.ensure()
        async with self._lock:
            if self._conn is None:
                return None
            async with db_errors("take session lease", "DB_CONNECTION_ERROR"):
                row = await self._conn.fetchrow(TAKE_SQL, session_id)
        if not row["got"]:
            return None
        self.owned.add(session_id)
        return Left(row["turn_state"], row["posted"], int(row["last_seq"]))

    async def release(self, session_id: str) -> None:
        if session_id not in self.owned:
            return
        self.owned.discard(session_id)
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                with contextlib.suppress(asyncpg.PostgresError, OSError):
                    await self._conn.fetchval(UNLOCK_SQL, session_id)

    async def post(self, session_id: str, user_id: str, message: pb.ClientMessage) -> None:
        """Hand a message to the session's owner (committed before this returns)."""
        async with db_errors("post to inbox", "DB_WRITE_ERROR"):
            await self.pool.fetchrow(
                QUERIES["post_inbox"], session_id, user_id, message.SerializeToString()
            )

    async def take_inbox(self, session_id: str) -> list[tuple[str, pb.ClientMessage]]:
        """The session's waiting messages, oldest first (removed from the inbox)."""
        async with db_errors("read inbox", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["take_inbox"], session_id)
        rows = sorted(rows, key=lambda r: r["id"])
        return [(r["user_id"], pb.ClientMessage.FromString(bytes(r["message"]))) for r in rows]

    async def waiting_sessions(self) -> list[str]:
        async with db_errors("read inbox", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["inbox_sessions"])
        return [r["session_id"] for r in rows]

    async def close(self) -> None:
        await self.presence.close()
        if self._listener is not None and not self._listener.is_closed():
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await self._listener.remove_listener("codelab_inbox", self._inbox_notified)
                await self._listener.remove_listener("codelab_events", self._events_notified)
        for conn in (self._listener, self._conn):
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                    await conn.close(timeout=2)
        self._conn = self._listener = None
        self.owned.clear()
