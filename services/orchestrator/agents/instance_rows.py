"""The agent instances' rows in Postgres, written behind memory, many in one statement.

Memory is authoritative (instances.py); the rows are a mirror for admins and other
replicas. Every change is queued and one writer per process commits whatever is queued
in one statement, then what was queued meanwhile: a lone lease is written at once, and a
busy process writes the leases and releases of many sessions together instead of two
statements per message. Each instance's latest state replaces the one queued before it
(a mirror shows where an instance is, not every step it took); failures add up. A write
that fails is logged and dropped: each row is written whole, so the instance's next
change heals it. ``settled`` waits until everything queued so far is written.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from services.common.db import Pool, db_errors
from services.common.errors import DatabaseError
from services.common.sql import load_queries
from services.orchestrator.agents.agent_instance import AgentInstance, InstanceState
from services.orchestrator.state import SQL_DIR

log = logging.getLogger(__name__)
QUERIES = load_queries(SQL_DIR / "templates.sql")
_WITH_SESSION = (InstanceState.BUSY, InstanceState.RESETTING, InstanceState.ERROR)


@dataclass
class _Row:
    template_name: str
    template_version: int
    state: str
    session_id: str | None
    failures: int
    leased: bool


class InstanceRows:
    """The queue of instance rows to write, and its one writer."""

    def __init__(self, pool: Pool, node: str) -> None:
        self.pool = pool
        self.node = node
        self._rows: dict[str, _Row] = {}
        self._leases: dict[str, tuple[str, int]] = {}
        self._writer: asyncio.Task[None] | None = None

    def put(self, instance: AgentInstance, added_failures: int = 0, leased: bool = False) -> None:
        """Queue ``instance``'s current state (``leased``: it was just leased to its
        session, which records the instance and version serving it)."""
        queued = self._rows.get(instance.instance_id)
        template = instance.template
        session = None
        if instance.state in _WITH_SESSION:  # cleaning up forgets it in memory: keep it
            session = instance.session_id or (queued.session_id if queued else None)
        self._rows[instance.instance_id] = _Row(
            template.name,
            template.version,
            instance.state.value,
            session,
            added_failures + (queued.failures if queued else 0),
            leased or bool(queued and queued.leased),
        )
        if leased and instance.session_id is not None:
            self._leases[instance.session_id] = (instance.instance_id, template.version)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())

    async def settled(self) -> None:
        """Wait until every row queued so far is written (or its write failed)."""
        if self._writer is not None:
            await asyncio.shield(self._writer)

    async def _write_all(self) -> None:
        while self._rows or self._leases:
            rows, self._rows = self._rows, {}
            leases, self._leases = self._leases, {}
            try:
                await self._write(rows, leases)
            except DatabaseError as error:
                log.warning("instance rows not written: %s", error.message)

    async def _write(self, rows: dict[str, _Row], leases: dict[str, tuple[str, int]]) -> None:
        values = list(rows.values())
        async with db_errors("save instance states", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["write_instances"],
                list(rows),
                [r.template_name for r in values],
                [r.template_version for r in values],
                [r.state for r in values],
                [r.session_id for r in values],
                [r.failures for r in values],
                [r.leased for r in values],
                self.node,
                list(leases),
                [instance for instance, _ in leases.values()],
                [version for _, version in leases.values()],
            )
