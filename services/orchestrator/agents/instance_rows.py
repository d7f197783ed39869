"""The agent instances' rows in Postgres, written behind memory, many in one statement.

Memory is authoritative (instances.py); the rows are a mirror for admins and other
replicas, queued and written by one writer per process (services/common/write_behind.py):
a busy process writes the leases and releases of many sessions together instead of two
statements per message. In a batch each instance's latest state is written (a mirror shows
where an instance is, not every step it took) and its failures add up. Each row is written
whole, so the instance's next change heals a row whose write failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.db import Pool, db_errors, unless_deadlocked
from services.common.sql import load_queries
from services.common.write_behind import WriteBehind
from services.orchestrator.agents.agent_instance import AgentInstance, InstanceState
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "templates.sql")
_WITH_SESSION = (InstanceState.BUSY, InstanceState.RESETTING, InstanceState.ERROR)


@dataclass
class _Row:
    instance_id: str
    template_name: str
    template_version: int
    state: InstanceState
    session_id: str | None
    failures: int
    leased: bool


class InstanceRows:
    """The instance rows to write, behind memory."""

    def __init__(self, pool: Pool, node: str) -> None:
        self.pool = pool
        self.node = node
        self._queue: WriteBehind[_Row] = WriteBehind(self._write, "instance rows")

    def put(self, instance: AgentInstance, added_failures: int = 0, leased: bool = False) -> None:
        """Queue ``instance``'s current state (``leased``: it was just leased to its
        session, which records the instance and version serving it)."""
        template = instance.template
        self._queue.put(
            _Row(
                instance.instance_id,
                template.name,
                template.version,
                instance.state,
                instance.session_id,
                added_failures,
                leased,
            )
        )

    async def settled(self) -> None:
        """Wait until every row queued so far is written (or its write failed)."""
        await self._queue.settled()

    async def _write(self, changes: list[_Row]) -> None:
        rows: dict[str, _Row] = {}
        leases: dict[str, tuple[str, int]] = {}
        for change in changes:
            before = rows.get(change.instance_id)
            if change.leased and change.session_id is not None:
                leases[change.session_id] = (change.instance_id, change.template_version)
            # Cleaning up forgets the session in memory; the row keeps it while it shows.
            session = change.session_id or (before.session_id if before else None)
            rows[change.instance_id] = _Row(
                change.instance_id,
                change.template_name,
                change.template_version,
                change.state,
                session if change.state in _WITH_SESSION else None,
                change.failures + (before.failures if before else 0),
                change.leased or bool(before and before.leased),
            )
        values = list(rows.values())
        taken = sorted(leases.items())  # sessions' rows taken in session order
        async with db_errors("save instance states", "DB_WRITE_ERROR"):
            await unless_deadlocked(
                lambda: self.pool.execute(
                    QUERIES["write_instances"],
                    [r.instance_id for r in values],
                    [r.template_name for r in values],
                    [r.template_version for r in values],
                    [r.state.value for r in values],
                    [r.session_id for r in values],
                    [r.failures for r in values],
                    [r.leased for r in values],
                    self.node,
                    [session for session, _ in taken],
                    [instance for _, (instance, _) in taken],
                    [version for _, (_, version) in taken],
                )
            )
