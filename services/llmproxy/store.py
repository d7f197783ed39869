"""Usage accounting in Postgres (schema ``llmproxy``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from services.common.db import Pool, db_errors
from services.common.sql import load_queries
from services.common.write_behind import WriteBehind

SQL_DIR = Path(__file__).parent / "sql"
QUERIES = load_queries(SQL_DIR / "queries.sql")


@dataclass(frozen=True)
class RequestRecord:
    """What one upstream call cost."""

    session_id: str
    purpose: str
    model: str
    duration_ms: float
    success: bool
    error_code: str | None
    prompt_tokens: int
    completion_tokens: int
    with_tools: bool
    reasoning_tokens: int = 0
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    """When the call started: its row is written behind it, with others, so the write's
    own time would give calls of one batch the same start."""


@dataclass(frozen=True)
class Usage:
    """Totals for one session (or for all of them)."""

    total_requests: int
    successful_requests: int
    failed_requests: int
    prompt_tokens: int
    completion_tokens: int
    average_duration_ms: float
    requests_with_tools: int
    reasoning_tokens: int = 0
    session_id: str = ""
    """The session summed up; empty for the totals across every session."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageStore:
    """Writes and sums llm_requests rows; the rows are written behind the calls (one
    statement for whatever is queued, see services/common/write_behind.py), and a read
    waits for this process's queued rows first."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._queue: WriteBehind[RequestRecord] = WriteBehind(self._write, "usage records")

    def record(self, r: RequestRecord) -> None:
        """Queue ``r`` (no caller waits for accounting)."""
        self._queue.put(r)

    async def settled(self) -> None:
        """Every record queued so far is written (or its write failed)."""
        await self._queue.settled()

    async def _write(self, rows: list[RequestRecord]) -> None:
        async with db_errors("record usage", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["record_requests"],
                [r.session_id for r in rows],
                [r.purpose for r in rows],
                [r.model for r in rows],
                [r.duration_ms for r in rows],
                [r.success for r in rows],
                [r.error_code for r in rows],
                [r.prompt_tokens for r in rows],
                [r.completion_tokens for r in rows],
                [r.with_tools for r in rows],
                [r.reasoning_tokens for r in rows],
                [r.started_at for r in rows],
            )

    async def usage(self, session_id: str) -> Usage:
        """One session's totals; an empty ``session_id`` sums every session."""
        await self.settled()
        async with db_errors("read usage", "DB_READ_ERROR"):
            if session_id:
                row = await self.pool.fetchrow(QUERIES["session_usage"], session_id)
            else:
                row = await self.pool.fetchrow(QUERIES["total_usage"])
        assert row is not None  # an aggregate always returns a row
        return Usage(**dict(row), session_id=session_id)

    async def list_usage(self, limit: int) -> list[Usage]:
        """Per-session totals, the most recently active session first."""
        await self.settled()
        async with db_errors("list usage", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_usage"], limit)
        return [Usage(**dict(row)) for row in rows]
