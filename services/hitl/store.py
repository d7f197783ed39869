"""Pending approvals and the audit log in Postgres (schema ``hitl``).

Every write that changes an approval's status also writes its audit row in the same
statement (a data-modifying CTE), so the log can never miss or invent a decision.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from services.common.db import Pool, db_errors
from services.common.sql import load_queries

SQL_DIR = Path(__file__).parent / "sql"
QUERIES = load_queries(SQL_DIR / "queries.sql")


@dataclass(frozen=True)
class NewApproval:
    """A tool call that must wait for a human."""

    call_id: str
    session_id: str
    tool_name: str
    arguments: dict[str, Any]
    timeout_seconds: float
    reason: str = ""
    risk: str = "medium"
    agent: str = ""
    plan_id: str | None = None
    step_id: str | None = None


@dataclass(frozen=True)
class ApprovalRow:
    """An approval as stored, with its outcome once decided."""

    call_id: str
    session_id: str
    tool_name: str
    arguments: dict[str, Any]
    reason: str
    risk: str
    agent: str
    plan_id: str | None
    step_id: str | None
    status: str
    timeout_seconds: float
    created_at: dt.datetime
    expires_at: dt.datetime
    decided_at: dt.datetime | None
    decision: str | None
    modified_arguments: dict[str, Any] | None
    feedback: str | None
    user_id: str


@dataclass(frozen=True)
class NewAudit:
    """An audit entry to append."""

    session_id: str
    decision: str
    event_type: str
    call_id: str = ""
    tool_name: str = ""
    original_arguments: Any = None
    modified_arguments: Any = None
    feedback: str | None = None
    user_id: str = ""
    details: Any = None


@dataclass(frozen=True, kw_only=True)
class AuditRow(NewAudit):
    """An audit entry as stored."""

    id: int
    created_at: dt.datetime


def _approval(row: asyncpg.Record) -> ApprovalRow:
    return ApprovalRow(**dict(row))


class ApprovalStore:
    """All hitl SQL goes through here."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def insert(self, new: NewApproval) -> ApprovalRow | None:
        """The new row, or None when the call_id already exists."""
        async with db_errors("create approval", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["create_approval"],
                new.call_id,
                new.session_id,
                new.tool_name,
                new.arguments,
                new.reason,
                new.risk,
                new.agent,
                new.plan_id,
                new.step_id,
                new.timeout_seconds,
            )
        return None if row is None else _approval(row)

    async def get(self, call_id: str) -> ApprovalRow | None:
        async with db_errors("read approval", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["get_approval"], call_id)
        return None if row is None else _approval(row)

    async def count_pending(self) -> int:
        """Approvals waiting for a human, every session."""
        async with db_errors("count approvals", "DB_READ_ERROR"):
            return int(await self.pool.fetchval(QUERIES["count_pending"]))

    async def list_pending(self, session_id: str) -> list[ApprovalRow]:
        async with db_errors("list approvals", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_pending"], session_id)
        return [_approval(r) for r in rows]

    async def apply_decision(
        self,
        session_id: str,
        call_id: str,
        *,
        status: str,
        decision: str,
        modified_arguments: dict[str, Any] | None,
        feedback: str | None,
        user_id: str,
    ) -> ApprovalRow | None:
        """Decide a pending, unexpired approval and audit it; None when it was not one."""
        async with db_errors("save decision", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["apply_decision"],
                call_id,
                session_id,
                status,
                decision,
                modified_arguments,
                feedback,
                user_id,
            )
        return None if row is None else _approval(row)

    async def expire(self, call_id: str) -> ApprovalRow | None:
        """Expire one overdue pending approval and audit it; None when it was not one."""
        async with db_errors("expire approval", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(QUERIES["expire_call"], call_id)
        return None if row is None else _approval(row)

    async def expire_due(self, limit: int) -> list[ApprovalRow]:
        """Expire (and audit) up to ``limit`` overdue approvals no other sweeper holds."""
        async with db_errors("expire approvals", "DB_WRITE_ERROR"):
            rows = await self.pool.fetch(QUERIES["expire_due"], limit)
        return [_approval(r) for r in rows]

    async def record_audit(self, entry: NewAudit) -> AuditRow:
        async with db_errors("record audit", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["record_audit"],
                entry.session_id,
                entry.call_id,
                entry.tool_name,
                entry.original_arguments,
                entry.modified_arguments,
                entry.decision,
                entry.feedback,
                entry.user_id,
                entry.event_type,
                entry.details,
            )
        assert row is not None  # insert ... returning always returns the row
        return AuditRow(**dict(row))

    async def list_audit(self, session_id: str, event_type: str, limit: int) -> list[AuditRow]:
        """Newest first; an empty filter matches everything."""
        async with db_errors("read audit", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_audit"], session_id, event_type, limit)
        return [AuditRow(**dict(r)) for r in rows]
