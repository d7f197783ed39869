"""Usage accounting in Postgres (schema ``llmproxy``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.db import Pool, db_errors
from services.common.sql import load_queries

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
    """Writes and sums llm_requests rows."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def record(self, r: RequestRecord) -> None:
        async with db_errors("record usage", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["record_request"],
                r.session_id,
                r.purpose,
                r.model,
                r.duration_ms,
                r.success,
                r.error_code,
                r.prompt_tokens,
                r.completion_tokens,
                r.with_tools,
                r.reasoning_tokens,
            )

    async def usage(self, session_id: str) -> Usage:
        """One session's totals; an empty ``session_id`` sums every session."""
        async with db_errors("read usage", "DB_READ_ERROR"):
            if session_id:
                row = await self.pool.fetchrow(QUERIES["session_usage"], session_id)
            else:
                row = await self.pool.fetchrow(QUERIES["total_usage"])
        assert row is not None  # an aggregate always returns a row
        return Usage(**dict(row), session_id=session_id)

    async def list_usage(self, limit: int) -> list[Usage]:
        """Per-session totals, the most recently active session first."""
        async with db_errors("list usage", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_usage"], limit)
        return [Usage(**dict(row)) for row in rows]
