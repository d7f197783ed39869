"""TOOL_TIMEOUT (seed 001): a dispatched tool call the IDE leaves unanswered too long.

Each tool's timeout comes from the catalog (``timeout_seconds``), ``TOOL_TIMEOUT``
overrides them all, and a tool without one gets ``DEFAULT_SECONDS``. The ledger is the
clock: a call is overdue when it has been ``dispatched`` longer than its timeout, so a
restart changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from services.common.db import Pool, db_errors
from services.orchestrator.state.store import QUERIES
from services.orchestrator.turn.toolbox import ToolSpec

DEFAULT_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class TimedOut:
    """A dispatched call had no result within ``seconds``: its session's owner closes it."""

    call_id: str
    session_id: str
    seconds: float


class ToolTimeouts:
    """Finds overdue dispatched calls."""

    def __init__(
        self,
        pool: Pool,
        catalog: Callable[[], Awaitable[Mapping[str, ToolSpec]]],
        override: float = 0.0,
    ) -> None:
        self.pool = pool
        self.catalog = catalog
        self.override = override

    def seconds(self, catalog: Mapping[str, ToolSpec], tool_name: str) -> float:
        """The timeout of ``tool_name``."""
        if self.override > 0:
            return self.override
        spec = catalog.get(tool_name)
        return float(spec.timeout_seconds) if spec and spec.timeout_seconds else DEFAULT_SECONDS

    async def overdue(self) -> list[TimedOut]:
        """Every dispatched call waiting longer than its tool's timeout."""
        catalog = await self.catalog()
        shortest = min(
            [self.seconds(catalog, name) for name in catalog] or [self.seconds(catalog, "")]
        )
        async with db_errors("read tool calls", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["overdue_calls"], shortest)
        due = []
        for row in rows:
            seconds = self.seconds(catalog, row["tool_name"])
            if row["waited"] >= seconds:
                due.append(TimedOut(row["call_id"], row["session_id"], seconds))
        return due
