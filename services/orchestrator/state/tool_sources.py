"""Registered tool sources in Postgres (``orchestrator.tool_sources``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.common.db import Pool, db_errors
from services.common.sql import load_queries
from services.orchestrator.peers.tool_source import ToolSource, parse_source
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "tool_sources.sql")


@dataclass(frozen=True)
class StoredSource:
    """A source's definition and when it was registered and last changed."""

    source: ToolSource
    created_at: datetime
    updated_at: datetime


def _stored(row: object) -> StoredSource:
    fields = dict(row)  # type: ignore[call-overload]
    return StoredSource(
        parse_source(fields["definition"]), fields["created_at"], fields["updated_at"]
    )


class SourceStore:
    """Save, list and remove tool sources."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def save(self, source: ToolSource) -> StoredSource:
        definition = source.as_json(redact=False)
        async with db_errors("save tool source", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(QUERIES["save_source"], source.name, definition)
        return _stored(row)

    async def active(self) -> list[StoredSource]:
        async with db_errors("list tool sources", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["active_sources"])
        return [_stored(r) for r in rows]

    async def remove(self, name: str) -> bool:
        """False when no active source has that name."""
        async with db_errors("remove tool source", "DB_WRITE_ERROR"):
            return await self.pool.fetchval(QUERIES["remove_source"], name) is not None
