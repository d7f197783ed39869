"""Sessions, messages and the event log in Postgres (schema ``orchestrator``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from services.common.db import Pool, db_errors
from services.common.sql import load_queries
from services.orchestrator.errors import SessionNotFound

SQL_DIR = Path(__file__).parent / "sql"
QUERIES = load_queries(SQL_DIR / "queries.sql")


@dataclass(frozen=True)
class SessionRow:
    """A session as stored."""

    session_id: str
    user_id: str
    title: str
    system_prompt: str
    current_agent: str
    created_at: dt.datetime
    last_activity: dt.datetime
    message_count: int
    deleted: bool = False
    switch_count: int = 0
    last_switch_at: dt.datetime | None = None
    busy_policy: str = "enqueue"
    turn_state: str = "idle"
    tool_tokens_offered: int = 0
    tool_tokens_all: int = 0


@dataclass(frozen=True)
class TurnStart:
    """What ``begin_turn`` read: the session, and whether earlier work is still open."""

    session: SessionRow
    open_calls: bool
    running_plan: bool
    parent: tuple[str, str] | None
    """(parent session, parent call) of a delegate's session."""


@dataclass(frozen=True)
class StoredMessage:
    """One entry of the LLM history."""

    role: str
    content: str
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    created_at: dt.datetime | None = field(default=None, compare=False)


def _session(row: asyncpg.Record) -> SessionRow:
    return SessionRow(
        session_id=row["session_id"],
        user_id=row["user_id"],
        title=row["title"],
        system_prompt=row["system_prompt"],
        current_agent=row["current_agent"],
        created_at=row["created_at"],
        last_activity=row["last_activity"],
        message_count=row["message_count"],
        deleted=row["deleted_at"] is not None,
        switch_count=row["switch_count"],
        last_switch_at=row["last_switch_at"],
        busy_policy=row["busy_policy"],
        turn_state=row["turn_state"],
        tool_tokens_offered=row["tool_tokens_offered"],
        tool_tokens_all=row["tool_tokens_all"],
    )


class SessionStore:
    """All orchestrator SQL goes through here."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def ensure_session(
        self,
        session_id: str,
        user_id: str = "",
        title: str = "",
        system_prompt: str = "",
        agent: str = "orchestrator",
    ) -> tuple[SessionRow, bool]:
        """The session, created when missing; (row, created). Another user's: not found."""
        async with db_errors("create session", "DB_WRITE_ERROR"):
            created = await self.pool.fetchval(
                QUERIES["upsert_session"], session_id, user_id, title, system_prompt, agent
            )
        row = await self.get_session(session_id, user_id)
        return row, created is not None

    async def attach(self, session_id: str, user_id: str, agent: str) -> None:
        """Create the session when missing; another user's (or a deleted) one: not found."""
        async with db_errors("create session", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(QUERIES["attach_session"], session_id, user_id, agent)
            if row is None:
                # Created at the same moment by another stream: its row is visible now.
                row = await self.pool.fetchrow(
                    QUERIES["attach_session"], session_id, user_id, agent
                )
        if row is None or row["deleted_at"] is not None or (user_id and row["user_id"] != user_id):
            raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)

    async def turn_state(self, session_id: str) -> str | None:
        async with db_errors("read session", "DB_READ_ERROR"):
            state: str | None = await self.pool.fetchval(QUERIES["turn_state"], session_id)
        return state

    async def get_session(self, session_id: str, user_id: str = "") -> SessionRow:
        async with db_errors("read session", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["get_session"], session_id)
        if row is None or row["deleted_at"] is not None or (user_id and row["user_id"] != user_id):
            raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)
        return _session(row)

    async def list_sessions(self, user_id: str = "", limit: int = 100) -> list[SessionRow]:
        async with db_errors("list sessions", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_sessions"], user_id, limit)
        return [_session(r) for r in rows]

    async def add_message(self, session_id: str, message: StoredMessage) -> None:
        async with db_errors("save message", "DB_WRITE_ERROR"):
            await self.pool.fetchrow(
                QUERIES["add_message"],
                session_id,
                message.role,
                message.content,
                message.name,
                message.tool_calls,
                message.tool_call_id,
            )

    async def history(self, session_id: str) -> list[StoredMessage]:
        async with db_errors("read history", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["history"], session_id)
        return [StoredMessage(**dict(r)) for r in rows]

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The last committed seq of each session (0 for one without events)."""
        async with db_errors("read events", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["last_seqs"], list(session_ids))
        found = {r["session_id"]: int(r["seq"]) for r in rows}
        return {sid: found.get(sid, 0) for sid in session_ids}

    async def append_events(
        self,
        session_ids: Sequence[str],
        seqs: Sequence[int],
        kinds: Sequence[str],
        events: Sequence[bytes],
    ) -> None:
        """Commit (session, seq, type, serialized event) rows of any sessions in one
        statement; replicas watching those sessions are notified at commit."""
        async with db_errors("save events", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["append_events"], session_ids, seqs, kinds, events)

    async def events_after(
        self, session_id: str, after: int, limit: int = 1000
    ) -> list[tuple[int, bytes]]:
        async with db_errors("read events", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["events_after"], session_id, after, limit)
        return [(r["seq"], bytes(r["event"])) for r in rows]

    async def soft_delete(self, session_id: str, user_id: str = "") -> bool:
        async with db_errors("delete session", "DB_WRITE_ERROR"):
            deleted = await self.pool.fetchval(QUERIES["soft_delete_session"], session_id, user_id)
        return deleted is not None

    async def event_stats(self) -> tuple[dict[str, int], dict[str, int]]:
        """(totals, events by type)."""
        async with db_errors("read stats", "DB_READ_ERROR"):
            totals = await self.pool.fetchrow(QUERIES["event_stats"])
            by_type = await self.pool.fetch(QUERIES["events_by_type"])
        return dict(totals or {}), {r["type"]: r["n"] for r in by_type}

    async def begin_turn(
        self, session_id: str, move_to: str | None, sources: Sequence[str]
    ) -> TurnStart:
        """Mark the turn running (and move the session to ``move_to`` when one of
        ``sources`` allows it), reading what the turn needs, in one round trip."""
        async with db_errors("start turn", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["begin_turn"], session_id, move_to is not None, move_to, list(sources)
            )
        if row is None or row["deleted_at"] is not None:
            raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)
        parent = row["parent_session_id"]
        return TurnStart(
            _session(row),
            row["open_calls"],
            row["running_plan"],
            (parent, row["parent_call_id"]) if parent else None,
        )

    async def end_turn(
        self, session_id: str, move_to: str | None, sources: Sequence[str], terminal: bool
    ) -> None:
        """Mark the turn idle, moving the session to ``move_to`` when ``sources`` allow."""
        async with db_errors("end turn", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["end_turn"], session_id, move_to, list(sources), terminal
            )

    async def set_turn_state(self, session_id: str, state: str) -> None:
        async with db_errors("save turn state", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["set_turn_state"], session_id, state)

    async def interrupted_turns(self) -> list[str]:
        async with db_errors("read sessions", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["interrupted_turns"])
        return [r["session_id"] for r in rows]

    async def last_event_type(self, session_id: str) -> str | None:
        async with db_errors("read events", "DB_READ_ERROR"):
            kind: str | None = await self.pool.fetchval(QUERIES["last_event_type"], session_id)
        return kind

    async def set_busy_policy(self, session_id: str, policy: str) -> None:
        async with db_errors("save session", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["set_busy_policy"], session_id, policy)

    async def purge_deleted(self, older_than_days: float) -> int:
        """Hard-delete sessions soft-deleted more than ``older_than_days`` ago."""
        async with db_errors("purge sessions", "DB_WRITE_ERROR"):
            count = await self.pool.fetchval(QUERIES["purge_deleted"], older_than_days)
        return int(count or 0)

    async def create_child(
        self, child_id: str, user_id: str, agent: str, parent_id: str, parent_call_id: str
    ) -> None:
        async with db_errors("create child session", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["create_child_session"],
                child_id,
                user_id,
                agent,
                parent_id,
                parent_call_id,
            )

    async def parent_of(self, session_id: str) -> tuple[str, str] | None:
        """(parent session, parent call) for a delegated child session, else None."""
        async with db_errors("read session", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["session_parent"], session_id)
        if row is None or row["parent_session_id"] is None:
            return None
        return row["parent_session_id"], row["parent_call_id"]

    async def children_of(self, session_id: str) -> list[str]:
        async with db_errors("read sessions", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["child_sessions"], session_id)
        return [r["session_id"] for r in rows]

    async def add_tool_tokens(self, session_id: str, offered: int, everything: int) -> None:
        async with db_errors("save tool tokens", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["add_tool_tokens"], session_id, offered, everything)
