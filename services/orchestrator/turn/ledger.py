"""Tool calls, plans and agent switches in Postgres: the state the agent loop resumes from.

Nothing here lives only in memory, so a turn suspended on the IDE or on a human
picks up from these rows whenever (and wherever) the next message arrives.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from services.common.db import Pool, db_errors
from services.orchestrator.state.store import (
    QUERIES,
    CallChange,
    StoredMessage,
    TurnContext,
    context_of_columns,
)


@dataclass(frozen=True)
class LedgerCall:
    """One proposed tool call and where it stands."""

    call_id: str
    session_id: str
    agent: str
    tool_name: str
    arguments: Any
    """The validated arguments (a dict), or the model's raw JSON text before validation."""
    executor: str
    state: str
    requires_approval: bool = False
    reason: str | None = None
    plan_id: str | None = None
    step_id: str | None = None


@dataclass
class Plan:
    """A plan and its steps (``steps``: id, desc, agent, status, estimated_time, result)."""

    plan_id: str
    session_id: str
    approval_request_id: str
    call_id: str
    planner: str
    goal: str
    steps: list[dict[str, Any]]
    status: str
    current_step: int = 0
    created_at: dt.datetime | None = field(default=None, compare=False)


def _call(row: asyncpg.Record) -> LedgerCall:
    return LedgerCall(**dict(row))


def _plan(row: asyncpg.Record) -> Plan:
    return Plan(**dict(row))


FINISHED_STATES = frozenset(
    {"completed", "failed", "cancelled", "rejected", "expired", "timed_out"}
)


class Ledger:
    """SQL for the loop's state.

    A finished call's commit also reads the session's next open call; ``next_open`` answers
    with it until the session's calls change here (every change of them goes through this
    class) or ``forget`` is called at the end of the message being handled (another owner
    may change them after that). Likewise a session whose turn began without a running
    plan (``no_running_plan``) has none until a plan is written here.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._next_open: dict[str, LedgerCall | None] = {}
        self._planless: set[str] = set()

    async def propose(self, answer: StoredMessage, calls: Sequence[LedgerCall]) -> list[LedgerCall]:
        """The model's ``answer`` that calls tools and its ``calls`` (one session, one
        agent, proposed), in one commit and in order; each belongs to the step of the
        session's running plan when one runs (their own plan ids are not read). Returns
        the calls as stored (a call id stored before is not proposed again)."""
        sid, agent = calls[0].session_id, calls[0].agent
        self._next_open.pop(sid, None)
        async with db_errors("save tool call", "DB_WRITE_ERROR"):
            rows = await self.pool.fetch(
                QUERIES["propose_calls"],
                sid,
                answer.content,
                agent,
                answer.tool_calls,
                answer.token_count,
                answer.reasoning,
                answer.reasoning_count,
                [c.call_id for c in calls],
                [c.tool_name for c in calls],
                [c.arguments for c in calls],
            )
        stored = {r["call_id"]: (r["plan_id"], r["step_id"]) for r in rows}
        return [
            dataclasses.replace(c, plan_id=stored[c.call_id][0], step_id=stored[c.call_id][1])
            for c in calls
            if c.call_id in stored
        ]

    async def next_open(self, session_id: str) -> LedgerCall | None:
        if session_id in self._next_open:  # read by the commit that finished the last one
            return self._next_open.pop(session_id)
        async with db_errors("read tool calls", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["next_open_call"], session_id)
        return _call(row) if row else None

    async def find(self, session_id: str, call_id: str) -> LedgerCall | None:
        """A call of this session or of one of its delegated children."""
        async with db_errors("read tool call", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["find_call_in_tree"], call_id, session_id)
        return _call(row) if row else None

    async def open_calls(self, session_id: str) -> list[LedgerCall]:
        async with db_errors("read tool calls", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["open_calls"], session_id)
        return [_call(r) for r in rows]

    async def get(self, session_id: str, call_id: str) -> LedgerCall | None:
        async with db_errors("read tool call", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["get_call"], call_id, session_id)
        return _call(row) if row else None

    async def set_state(
        self,
        call: LedgerCall,
        state: str,
        *,
        arguments: dict[str, Any] | None = None,
        reason: str | None = None,
        requires_approval: bool | None = None,
        result: Any = None,
    ) -> None:
        self._next_open.pop(call.session_id, None)
        async with db_errors("update tool call", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["set_call_state"],
                call.call_id,
                call.session_id,
                state,
                arguments,
                reason,
                requires_approval,
                result,
            )

    def dispatching(self, call: LedgerCall, arguments: dict[str, Any]) -> CallChange:
        """``call`` goes out with ``arguments`` (validated): the change that the commit of
        the event sending it carries (``SessionHub.emit_all``)."""
        self._next_open.pop(call.session_id, None)
        return CallChange(call.session_id, call.call_id, "dispatched", arguments)

    async def complete(
        self,
        call: LedgerCall,
        message: StoredMessage,
        state: str,
        result: Any,
        sources: Sequence[tuple[str, str]] = (),
        artifacts: Sequence[tuple[str, str, int]] = (),
        *,
        read_context: bool = False,
    ) -> TurnContext | None:
        """A finished call in one commit: ``message`` (the tool message the model reads),
        the call's state and result, the sources (kind, locator) and artifacts (kind,
        path, bytes) it left. ``state`` is a finished one. ``read_context``: when no call
        of the session is left open, the same round trip reads what the next model call
        reads (``SessionStore.turn_context``, the writes included), returned; else None."""
        assert state in FINISHED_STATES, state
        sid = call.session_id
        self._next_open.pop(sid, None)
        async with db_errors("save tool result", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["complete_call"],
                call.session_id,
                call.call_id,
                message.content,
                message.name,
                message.token_count,
                state,
                result,
                [kind for kind, _ in sources],
                [locator for _, locator in sources],
                [kind for kind, _, _ in artifacts],
                [path for _, path, _ in artifacts],
                [size for _, _, size in artifacts],
                read_context,
            )
        following = row["next_call"]
        self._next_open[sid] = LedgerCall(**following) if following is not None else None
        return context_of_columns(row)

    def no_running_plan(self, session_id: str) -> None:
        """The message being handled began with no plan of the session running."""
        self._planless.add(session_id)

    def forget(self, session_id: str) -> None:
        """The message being handled ended: its next open call and running plan are read
        again."""
        self._next_open.pop(session_id, None)
        self._planless.discard(session_id)

    async def reviewed_patches(self, session_id: str) -> list[str]:
        """The patches kept in the session's latest patch reviews."""
        async with db_errors("read tool calls", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["reviewed_patches"], session_id)
        return [r["patch"] for r in rows]

    async def create_plan(self, plan: Plan) -> None:
        self._planless.discard(plan.session_id)
        async with db_errors("save plan", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["create_plan"],
                plan.plan_id,
                plan.session_id,
                plan.approval_request_id,
                plan.call_id,
                plan.planner,
                plan.goal,
                plan.steps,
            )

    async def plan_by_request(self, session_id: str, request_id: str) -> Plan | None:
        async with db_errors("read plan", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["get_plan_by_request"], request_id, session_id)
        return _plan(row) if row else None

    async def running_plan(self, session_id: str) -> Plan | None:
        if session_id in self._planless:
            return None
        async with db_errors("read plan", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["running_plan"], session_id)
        return _plan(row) if row else None

    async def pending_plans(self, session_id: str) -> list[Plan]:
        async with db_errors("read plans", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["pending_plans"], session_id)
        return [_plan(r) for r in rows]

    async def save_plan(self, plan: Plan) -> None:
        self._planless.discard(plan.session_id)
        async with db_errors("update plan", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["update_plan"], plan.plan_id, plan.status, plan.steps, plan.current_step
            )
