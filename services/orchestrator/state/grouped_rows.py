"""Writes that many sessions make at once, group-committed (``GroupWrite``).

A turn's end, a session row's changes (an agent switch, a version pin, tool-schema token
counts) and a stored message are one small statement each per session; at a thousand live
sessions they come by the hundred a second. Each caller still waits for its own commit, as
with a statement of its own, but the rows that come while one statement is in flight share
the next: a busy process makes one statement for many sessions, an idle one the statement
it always made. Each statement takes the sessions' rows in session order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from services.common.db import Pool, db_errors, unless_deadlocked
from services.common.group_write import GroupWrite


class TurnEnd(NamedTuple):
    """One session's turn end (``sources`` comma-separated: session states have no commas)."""

    session_id: str
    move_to: str | None
    sources: str
    terminal: bool
    tool_tokens: tuple[int, int]


class RowWrite(NamedTuple):
    """One session's row changes: ``switch`` (from, to, reason, confidence, method),
    ``pin`` (agent, version), ``counts`` (offered, all), all None (0) for none."""

    session_id: str
    switch: tuple[str | None, ...]
    pin: tuple[str | None, int | None]
    counts: tuple[int, int]
    flush: bool


MessageRow = tuple[Any, ...]
"""A message's columns, in ``add_messages``' order: session, role, content, name, tool
calls, tool call id, tokens, reasoning, reasoning tokens, applied claim, its first seq."""


class GroupedRows:
    """The grouped writes (their SQL: ``end_turns``, ``session_changes`` and
    ``add_messages`` in queries.sql)."""

    def __init__(self, pool: Pool, end_turns: str, session_changes: str, add_messages: str) -> None:
        self.pool = pool
        self._end_sql = end_turns
        self._changes_sql = session_changes
        self._add_sql = add_messages
        self._ends: GroupWrite[TurnEnd] = GroupWrite(lambda ends: self.write_ends(ends))
        self._rows: GroupWrite[RowWrite] = GroupWrite(lambda rows: self.write_rows(rows))
        self._messages: GroupWrite[tuple[MessageRow, bool]] = GroupWrite(
            lambda messages: self.write_messages(messages)
        )

    async def add_message(self, row: MessageRow, flush: bool) -> None:
        await self._messages.put((row, flush))

    async def write_messages(self, messages: list[tuple[MessageRow, bool]]) -> None:
        """One statement, in session order; a session's own messages in the order they came
        (a stable sort)."""
        ordered = sorted((row for row, _ in messages), key=lambda row: str(row[0]))
        columns = [list(column) for column in zip(*ordered, strict=True)]
        flush = any(flush for _, flush in messages)
        async with db_errors("save message", "DB_WRITE_ERROR"):
            await unless_deadlocked(lambda: self.pool.execute(self._add_sql, *columns, flush))

    async def end_turn(self, end: TurnEnd) -> None:
        await self._ends.put(end)

    async def write(self, changes: RowWrite) -> None:
        await self._rows.put(changes)

    async def write_ends(self, ends: list[TurnEnd]) -> None:
        """One statement (a session ends one turn at a time: it is in a batch once)."""
        ends = sorted(ends, key=lambda end: end.session_id)  # rows locked in session order
        columns = [list(column) for column in zip(*ends, strict=True)]
        offered, everything = (list(counts) for counts in zip(*columns.pop(), strict=True))
        async with db_errors("end turn", "DB_WRITE_ERROR"):
            await unless_deadlocked(
                lambda: self.pool.execute(self._end_sql, *columns, offered, everything)
            )

    async def write_rows(self, writes: list[RowWrite]) -> None:
        """One statement per round: a session's second change in the batch goes in the next
        round's, after its first (an UPDATE ... FROM applies one row per session)."""
        rounds: list[list[RowWrite]] = []
        seen: Counter[str] = Counter()
        for write in writes:
            turn = seen[write.session_id]
            seen[write.session_id] += 1
            if turn == len(rounds):
                rounds.append([])
            rounds[turn].append(write)
        async with db_errors("save session", "DB_WRITE_ERROR"):
            for batch in rounds:
                batch.sort(key=lambda write: write.session_id)  # rows taken in session order
                columns = [[w.session_id for w in batch]]
                columns += [list(c) for c in zip(*(w.switch for w in batch), strict=True)]
                columns += [list(c) for c in zip(*(w.pin for w in batch), strict=True)]
                columns += [list(c) for c in zip(*(w.counts for w in batch), strict=True)]
                flush = any(w.flush for w in batch)
                await unless_deadlocked(
                    lambda: self.pool.execute(self._changes_sql, *columns, flush)  # noqa: B023
                )
