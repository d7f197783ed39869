"""Sessions, messages and the event log in Postgres (schema ``orchestrator``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncpg

from services.common.db import Pool, db_errors
from services.common.sql import load_queries
from services.orchestrator.errors import SessionNotFound
from services.orchestrator.state import SQL_DIR
from services.orchestrator.state.grouped_rows import GroupedRows, RowWrite, TurnEnd
from services.orchestrator.turn.tokens import message_tokens, text_tokens

QUERIES = load_queries(SQL_DIR / "queries.sql")


class Attached(NamedTuple):
    """A session a stream attached to: its owner, its system prompt and the last seq of
    its log, read by the attach's own statement."""

    owner: str
    last_seq: int
    system_prompt: str = ""


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
    agent_versions: Mapping[str, int] = field(default_factory=dict)
    """The template version each agent of the running task is pinned to."""
    clarifications_used: int = 0
    searches_used: int = 0


@dataclass(frozen=True)
class TurnStart:
    """What ``begin_turn`` read: the session, and whether earlier work is still open."""

    session: SessionRow
    open_calls: bool
    running_plan: bool
    parent: tuple[str, str] | None
    """(parent session, parent call) of a delegate's session."""
    call_id: str | None = None
    """The call a tool result answers, looked up by the same statement: ``call``, its row
    as the ledger reads it (None: no such call in the session or its delegates)."""
    call: Mapping[str, Any] | None = None
    context: TurnContext | None = None
    """What the first model call reads (``turn_context``), when asked: read by the same
    statement, before the turn's own writes."""
    stored: bool = False
    """The user message this turn begins with was stored by the same statement."""
    switched: SwitchRow | None = None
    """The switch the same statement made to the agent given ahead (``AgentAhead``)."""
    pinned: bool = False
    """The same statement pinned the version of the agent given ahead."""

    def before(self) -> SessionRow:
        """The session as it was before this statement's switch and pin."""
        session = self.session
        versions = session.agent_versions
        if self.pinned:  # (the agent given ahead is current now, switched to or not)
            versions = {k: v for k, v in versions.items() if k != session.current_agent}
        agent = self.switched.from_agent if self.switched else session.current_agent
        return dataclasses.replace(session, current_agent=agent, agent_versions=versions)


@dataclass(frozen=True, slots=True)
class Unclaimed:
    """A client message id to claim as its turn begins (not claimed when it arrived)."""

    client_id: str
    kind: str
    live: bool
    """Another delivery of the id waits or runs in this process."""


class AgentAhead(NamedTuple):
    """The agent a user message goes to whatever the session holds (the one it names, or
    single-agent mode's), switched to and pinned by ``begin_turn`` when it stores the
    message: the turn then has no row write of its own before its first event."""

    agent: str
    version: int
    reason: str
    confidence: str | None
    method: str


@dataclass(frozen=True, slots=True)
class Repeated:
    """``begin_turn`` found the message's id claimed by an earlier delivery: nothing began."""

    first_seq: int | None


@dataclass(frozen=True, slots=True)
class CallChange:
    """A tool call's new state (and validated arguments, None: kept), committed with the
    events that announce it (``SessionStore.append_events``)."""

    session_id: str
    call_id: str
    state: str
    arguments: Mapping[str, Any] | None = None


TurnContext = tuple[list["StoredMessage"], Mapping[str, Any]]
"""The history a model call reads and the raw hand-over context (see turn/handover.py)."""

_CONTEXT_FIELDS = (
    "id",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "created_at",
    "tokens",
    "reasoning",
    "reasoning_tokens",
    "covers_from",
    "covered",
)


def context_of(rows: Sequence[Sequence[Any]]) -> TurnContext:
    """``turn_context``'s rows (records, or the tuples of ``begin_turn``'s array), in its
    column order: the first carries the hand-over context, the others the history."""
    return stored_messages(_CONTEXT_FIELDS, rows[1:]), rows[0][-1]


_CONTEXT_COLUMNS = tuple(f"ctx_{name}" for name in (*_CONTEXT_FIELDS, "handover"))


def context_of_columns(row: Mapping[str, Any]) -> TurnContext | None:
    """``begin_turn``'s context, read as one array per column of ``turn_context``; None when
    it was not read."""
    columns = [row[name] for name in _CONTEXT_COLUMNS]
    if columns[0] is None:
        return None
    return context_of(list(zip(*columns, strict=True)))


def stored_messages(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[StoredMessage]:
    """``rows`` as messages, column ``i`` being field ``names[i]`` (columns past the names are
    not read); what a row leaves out keeps its default, as with the constructor.

    Every model call reads its whole history through here. A frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``: 3.5 us a message on the 2-core AMD box,
    and with the mapping built per row ~5 ms of the orchestrator's CPU for a 1,000-message
    history, before the turn's first token. Filling the instance's ``__dict__`` takes 1.2-2.2
    ms; the message is as frozen as one built by ``__init__`` (a test compares the two)."""
    given = set(names)
    unknown, missing = given - _DEFAULTS.keys() - _REQUIRED, _REQUIRED - given
    if unknown or missing:
        raise TypeError(
            f"StoredMessage columns: unknown {sorted(unknown)}, missing {sorted(missing)}"
        )
    left_out = {name: value for name, value in _DEFAULTS.items() if name not in given}
    new = object.__new__
    out = []
    for row in rows:
        message = new(StoredMessage)
        fields = message.__dict__
        fields.update(zip(names, row, strict=False))
        if left_out:
            fields.update(left_out)
        out.append(message)
    return out


class SwitchRow(NamedTuple):
    """An agent switch as recorded (``agent_switches``)."""

    from_agent: str
    to_agent: str
    reason: str
    confidence: str | None
    method: str


@dataclass
class RowChanges:
    """Changes to one session's row, written together by ``write_changes``: a turn's
    switch, version pin and first model call's tool-schema token counts are one statement,
    not three updates of the same row queueing for its lock."""

    switch: SwitchRow | None = None
    pin: tuple[str, int] | None = None
    """(agent, template version) the task runs on from now on."""
    tool_tokens: tuple[int, int] | None = None
    """(offered, all) schema tokens of a model call."""

    def __bool__(self) -> bool:
        return not (self.switch is None and self.pin is None and self.tool_tokens is None)


@dataclass(frozen=True)
class StoredMessage:
    """One entry of the LLM history."""

    role: str
    content: str
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    created_at: dt.datetime | None = field(default=None, compare=False)
    reasoning: str | None = None
    """The model's reasoning before this answer (kept for the trace)."""
    tokens: int = field(default=0, compare=False)
    """Estimated tokens, counted when the message was written (0: not counted yet)."""
    id: int = field(default=0, compare=False)
    """The row's id once stored; a summary's is 0."""
    covers_from: int | None = field(default=None, compare=False)
    """A summary's first covered message id (its last is the id before the next row)."""
    covered: int = field(default=0, compare=False)
    """How many messages a summary covers."""
    reasoning_tokens: int = field(default=0, compare=False)
    """Estimated tokens of ``reasoning``, counted apart when the message was written."""

    @property
    def token_count(self) -> int:
        """The stored count, or the estimate for a message not stored yet."""
        return self.tokens or message_tokens(self.content, self.tool_calls)

    @property
    def reasoning_count(self) -> int:
        """``reasoning``'s stored count, or its estimate for a message not stored yet."""
        return self.reasoning_tokens or text_tokens(self.reasoning or "")

    def prompt_tokens(self, with_reasoning: bool = False) -> int:
        """What the message weighs in a prompt (its reasoning only when it is sent back)."""
        return self.token_count + (self.reasoning_count if with_reasoning else 0)


_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(StoredMessage)
    if f.default is not dataclasses.MISSING
}
"""What a field of a message is when its row leaves it out (none has a default factory)."""
_REQUIRED = frozenset(f.name for f in dataclasses.fields(StoredMessage)) - _DEFAULTS.keys()


@dataclass(frozen=True)
class Summary:
    """The model's summary of a session's messages ``covers_from``..``covers_to``."""

    covers_from: int
    covers_to: int
    messages: int
    content: str
    tokens: int


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
        agent_versions=row.get("agent_versions") or {},
        clarifications_used=row.get("clarifications_used") or 0,
        searches_used=row.get("searches_used") or 0,
    )


class SessionStore:
    """All orchestrator SQL goes through here."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.grouped = GroupedRows(
            pool, QUERIES["end_turns"], QUERIES["session_changes"], QUERIES["add_messages"]
        )

    async def ensure_session(
        self,
        session_id: str,
        user_id: str = "",
        title: str = "",
        system_prompt: str = "",
        agent: str = "orchestrator",
    ) -> tuple[SessionRow, bool]:
        """The session, created when missing; (row, created). Another user's: not found."""
        async with db_errors("create session", "SESSION_CREATION_FAILED"):
            created = await self.pool.fetchval(
                QUERIES["upsert_session"], session_id, user_id, title, system_prompt, agent
            )
        row = await self.get_session(session_id, user_id)
        return row, created is not None

    async def attach(
        self, session_id: str, user_id: str, agent: str, title: str = "", system_prompt: str = ""
    ) -> Attached:
        """Create the session when missing (with ``title`` and ``system_prompt``); another
        user's (or a deleted) one: not found. Returns its owner and its log's last seq."""
        arguments = (session_id, user_id, agent, title, system_prompt)
        async with db_errors("create session", "SESSION_CREATION_FAILED"):
            row = await self.pool.fetchrow(QUERIES["attach_session"], *arguments)
            if row is None:
                # Created by a concurrent attach that committed after this statement's
                # snapshot (the insert waited for it, the select could not see it): a new
                # statement sees the row.
                row = await self.pool.fetchrow(QUERIES["attach_session"], *arguments)
        if row is None or row["deleted_at"] is not None or (user_id and row["user_id"] != user_id):
            raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)
        return Attached(row["user_id"], row["last_seq"], row["system_prompt"])

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

    async def add_message(
        self,
        session_id: str,
        message: StoredMessage,
        *,
        flush: bool = True,
        applies: tuple[str, int] | None = None,
    ) -> None:
        """Store ``message`` with its token counts (counted here, once); ``flush`` False:
        only when an event of the same turn will commit after it (that commit flushes the
        WAL, this one too). ``applies``: (client message id, first seq) of the claim this
        message carries out, marked started in the same commit. Written with other
        sessions' messages that came meanwhile (``GroupedRows``)."""
        cid, first_seq = applies if applies is not None else (None, None)
        await self.grouped.add_message(
            (
                session_id,
                message.role,
                message.content,
                message.name,
                None if message.tool_calls is None else json.dumps(message.tool_calls),
                message.tool_call_id,
                message.token_count,
                message.reasoning,
                message.reasoning_count,
                cid,
                first_seq,
            ),
            flush,
        )

    async def history(self, session_id: str) -> list[StoredMessage]:
        """Every message of the session, in order (summaries are not messages)."""
        async with db_errors("read history", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["history"], session_id)
        return stored_messages(list(rows[0].keys()), rows) if rows else []

    async def context(self, session_id: str) -> list[StoredMessage]:
        """What the model reads: the latest summary (role ``summary``, id 0) when there
        is one, then every message after the ones it covers."""
        return (await self.turn_context(session_id))[0]

    async def turn_context(self, session_id: str) -> TurnContext:
        """``context`` and, read by the same statement, the raw hand-over context (see
        turn/handover.py)."""
        async with db_errors("read history", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["context"], session_id)
        return context_of(rows)

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        async with db_errors("save summary", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["add_summary"],
                session_id,
                summary.covers_from,
                summary.covers_to,
                summary.messages,
                summary.content,
                summary.tokens,
            )

    async def summaries(self, session_id: str) -> list[Summary]:
        """Every summary of the session, oldest first."""
        async with db_errors("read summaries", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["summaries"], session_id)
        return [Summary(**dict(r)) for r in rows]

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
        *,
        notify: bool = True,
        changes: Sequence[CallChange] = (),
    ) -> None:
        """Commit (session, seq, type, serialized event) rows of any sessions in one
        statement; ``notify``: replicas watching those sessions are told at commit;
        ``changes``: tool calls' state changes, committed with the events."""
        async with db_errors("save events", "DB_WRITE_ERROR"):
            if not changes:
                query = QUERIES["append_events" if notify else "append_events_quietly"]
                await self.pool.execute(query, session_ids, seqs, kinds, events)
                return
            await self.pool.execute(
                QUERIES["append_events_with_calls"],
                session_ids,
                seqs,
                kinds,
                events,
                [change.session_id for change in changes],
                [change.call_id for change in changes],
                [change.state for change in changes],
                [change.arguments for change in changes],
                notify,
            )

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
        self,
        session_id: str,
        move_to: str | None,
        sources: Sequence[str],
        claim: Unclaimed | None = None,
        call_id: str | None = None,
        *,
        read_context: bool = False,
        user: StoredMessage | None = None,
        applies: tuple[str, int] | None = None,
        ahead: AgentAhead | None = None,
    ) -> TurnStart | Repeated:
        """Mark the turn running (and move the session to ``move_to`` when one of
        ``sources`` allows it), reading what the turn needs, in one round trip. ``claim``:
        the message's id is claimed in the same statement, and a repeat begins nothing;
        ``call_id``: the call a tool result answers, read too; ``read_context``: what the
        first model call reads, read too (``TurnStart.context``). ``user``: the user
        message the turn begins with, stored too when nothing is open (``TurnStart.stored``;
        else the caller stores it after closing what is), carrying out ``applies`` as
        ``add_message`` does; and then switched to ``ahead`` and pinned
        (``TurnStart.switched``, ``pinned``)."""
        cid, kind, live = (claim.client_id, claim.kind, claim.live) if claim else (None, "", False)
        applied, first_seq = applies if applies is not None else (None, None)
        async with db_errors("start turn", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["begin_turn"],
                session_id,
                move_to is not None,
                move_to,
                list(sources),
                cid,
                kind,
                live,
                call_id,
                read_context,
                user.content if user is not None else None,
                user.token_count if user is not None else 0,
                applied,
                first_seq,
                *(ahead or (None, None, None, None, None)),
            )
        if not row["applies"]:
            return Repeated(row["earlier_seq"])
        if row["session_id"] is None or row["deleted_at"] is not None:
            raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)
        parent = row["parent_session_id"]
        switched = None
        if ahead is not None and row["switched_from"] is not None:
            to, _, reason, confidence, method = ahead
            switched = SwitchRow(row["switched_from"], to, reason, confidence, method)
        return TurnStart(
            _session(row),
            row["open_calls"],
            row["running_plan"],
            (parent, row["parent_call_id"]) if parent else None,
            call_id,
            row["call"],
            context_of_columns(row),
            row["stored"],
            switched,
            bool(row["pinned_ahead"]),
        )

    async def end_turn(
        self,
        session_id: str,
        move_to: str | None,
        sources: Sequence[str],
        terminal: bool,
        tool_tokens: tuple[int, int] = (0, 0),
    ) -> None:
        """Mark the turn idle, moving the session to ``move_to`` when ``sources`` allow;
        ``tool_tokens``: (offered, all) schema tokens of model calls still to be counted.
        Returns once committed (with other sessions' ends: ``GroupedRows``)."""
        # Session states (SessionState's values) have no commas.
        end = TurnEnd(session_id, move_to, ",".join(sources), terminal, tool_tokens)
        await self.grouped.end_turn(end)

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

    async def write_changes(self, session_id: str, changes: RowChanges, *, flush: bool) -> None:
        """Write ``changes`` to the session's row in one statement (nothing when empty),
        with other sessions' changes (``GroupedRows``); ``flush`` False: only when an event
        of the same turn commits after it."""
        if not changes:
            return
        switch, pin, counts = changes.switch, changes.pin, changes.tool_tokens
        await self.grouped.write(
            RowWrite(
                session_id,
                switch if switch is not None else (None,) * 5,
                pin if pin is not None else (None, None),
                counts if counts is not None else (0, 0),
                flush,
            )
        )

    async def set_context_metadata(self, session_id: str, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` into the session's context metadata (seed 000)."""
        async with db_errors("save session", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["set_context_metadata"], session_id, metadata)

    async def spend_budget(self, session_id: str, clarifications: int, searches: int) -> None:
        async with db_errors("save session", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["spend_budget"], session_id, clarifications, searches)
