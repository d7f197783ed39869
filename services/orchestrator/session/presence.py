"""Which orchestrator replicas are alive, so that a lone one sends no event notifications.

A group commit notifies ``codelab_events`` so that other replicas' subscribers read the
log (ownership.py). A replica alone has no one to tell, yet every notification wakes a
Postgres backend for each listening connection and this replica's own listener, at every
commit of every turn. So the commit notifies only while another replica may be alive.

Each replica holds an advisory lock ``(SPACE, id)`` on its lease connection while it lives
(dropped with the connection). Joining, it listens on ``codelab_replicas``, takes the lock
and lists the other holders: none, and it commits quietly; some, and it notifies, tells
them ``join <id>`` and waits (at most ``JOIN_WAIT``) for each one's ``ack <their id>
<id>`` before it serves. A replica that hears a join notifies from then on, and answers
only once the commit in flight (whose statement may have been built quiet) is committed:
every commit the joiner could miss was committed before its subscriptions start, so their
first read sees it. A replica that once had company notifies until it restarts. A replica
of a release before this one holds no such lock: its listener connection, whose last
statement is the LISTEN on ``codelab_events``, counts as company (it does not answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any, Protocol

import asyncpg

from services.common.db import Pool, db_errors

log = logging.getLogger(__name__)

CHANNEL = "codelab_replicas"
SPACE = 0x636C6162
"""The advisory lock space of replica presence (two-int locks: no clash with leases)."""
JOIN_WAIT = 5.0
"""Seconds a joining replica waits for the others' answers before it serves anyway."""
TAKE_SQL = "select pg_try_advisory_lock($1, $2)"
OTHERS_SQL = """
select objid::bigint as id from pg_locks
where locktype = 'advisory' and objsubid = 2 and granted and classid::bigint = $1
  and objid::bigint <> $2
  and database = (select oid from pg_database where datname = current_database())
"""
EARLIER_SQL = """
select exists (select 1 from pg_stat_activity
               where datname = current_database() and pid <> pg_backend_pid()
                 and query = 'LISTEN "codelab_events"')
"""
NOTIFY_SQL = "select pg_notify($1, $2)"


class Notifier(Protocol):
    """What presence switches: the event writer (``SessionHub``)."""

    notify: bool

    async def settled(self) -> None: ...


class Presence:
    """This replica's place among the live replicas: it sets ``hub.notify`` (others may
    listen) and answers the joins of replicas that start later."""

    def __init__(self, pool: Pool, join_wait: float = JOIN_WAIT) -> None:
        self.pool = pool
        self.join_wait = join_wait
        self.id = secrets.randbelow(1 << 31)
        self.hub: Notifier | None = None
        self._awaited: set[int] = set()
        self._answered = asyncio.Event()
        self._answers: set[asyncio.Task[None]] = set()

    def _set(self, notify: bool) -> None:
        if self.hub is not None:
            self.hub.notify = notify

    async def join(self, lease: asyncpg.Connection, listener: asyncpg.Connection) -> None:
        """Announce this replica on (new) connections; returns when it may serve."""
        self._set(True)  # until the others are known
        async with db_errors("join the replicas", "DB_CONNECTION_ERROR"):
            await listener.add_listener(CHANNEL, self._heard)
            while not await lease.fetchval(TAKE_SQL, SPACE, self.id):
                self.id = secrets.randbelow(1 << 31)  # another replica drew the same id
            others = {row["id"] for row in await lease.fetch(OTHERS_SQL, SPACE, self.id)}
            earlier = bool(await lease.fetchval(EARLIER_SQL))
            if not others:
                self._set(earlier)
                return
            self._awaited, self._answered = set(others), asyncio.Event()
            await self.pool.execute(NOTIFY_SQL, CHANNEL, f"join {self.id}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.join_wait):
                await self._answered.wait()
        if self._awaited:
            log.warning(
                "replicas did not answer the join",
                extra={"fields": {"replicas": sorted(self._awaited)}},
            )

    def _heard(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        kind, _, rest = payload.partition(" ")
        ids = [int(part) for part in rest.split() if part.isdigit()]
        if kind == "join" and ids and ids[0] != self.id:
            self._set(True)
            answer = asyncio.get_running_loop().create_task(self._answer(ids[0]))
            self._answers.add(answer)
            answer.add_done_callback(self._answers.discard)
        elif kind == "ack" and len(ids) == 2 and ids[1] == self.id:
            self._awaited.discard(ids[0])
            if not self._awaited:
                self._answered.set()

    async def _answer(self, joiner: int) -> None:
        """Tell ``joiner`` that every commit from now on notifies."""
        if self.hub is not None:
            await self.hub.settled()
        try:
            await self.pool.execute(NOTIFY_SQL, CHANNEL, f"ack {self.id} {joiner}")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            log.warning("join not answered", extra={"fields": {"err": str(error)}})

    async def close(self) -> None:
        """Stop answering (the connections close with the ownership)."""
        for answer in tuple(self._answers):
            answer.cancel()
        if self._answers:
            await asyncio.wait(self._answers)
