"""The session state machine of seed 003 (section 3.1), as data plus one guarded write.

A session moves INITED -> RESEARCHING -> (WAITING_FOR_CLARIFICATION <-> RESEARCHING) ->
COMPLETED | FAILED | CANCELLED. The seed ends a session there; an IDE session here is a
conversation of many tasks, so a new user message may reopen a finished session
(terminal -> RESEARCHING). Re-entering the current state is accepted as a no-op, so a
step replayed after a crash does not fail.

``set_state`` checks the transition inside the UPDATE itself (``state = any(allowed
sources)``), so two replicas racing on one session cannot both make a forbidden move.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from services.common.db import Pool, db_errors
from services.common.sql import load_queries
from services.orchestrator.errors import InvalidTransition, SessionNotFound
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "templates.sql")


class SessionState(StrEnum):
    """Where a session's task stands (column ``orchestrator.sessions.state``)."""

    INITED = "INITED"
    RESEARCHING = "RESEARCHING"
    WAITING_FOR_CLARIFICATION = "WAITING_FOR_CLARIFICATION"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = SessionState
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED})
TRANSITIONS: Mapping[SessionState, frozenset[SessionState]] = {
    # start(); an error or a cancel may come before the first model call.
    S.INITED: frozenset({S.RESEARCHING, S.FAILED, S.CANCELLED}),
    # ClarificationTool, FinalAnswer(completed | failed) / error, user cancel.
    S.RESEARCHING: frozenset({S.WAITING_FOR_CLARIFICATION, S.COMPLETED, S.FAILED, S.CANCELLED}),
    # provide_clarification(); the wait may also be cancelled or time out.
    S.WAITING_FOR_CLARIFICATION: frozenset({S.RESEARCHING, S.FAILED, S.CANCELLED}),
    # The seed's terminal states; a new user message starts the next task of the session.
    S.COMPLETED: frozenset({S.RESEARCHING}),
    S.FAILED: frozenset({S.RESEARCHING}),
    S.CANCELLED: frozenset({S.RESEARCHING}),
}


def can_move(current: SessionState, target: SessionState) -> bool:
    """True when ``current -> target`` is allowed (staying put always is)."""
    return current == target or target in TRANSITIONS[current]


def sources_of(target: SessionState) -> frozenset[SessionState]:
    """Every state from which ``target`` may be entered (itself included)."""
    return frozenset({target, *(s for s, nexts in TRANSITIONS.items() if target in nexts)})


def check_transition(current: SessionState, target: SessionState) -> None:
    """Raise InvalidTransition unless ``current -> target`` is allowed."""
    if not can_move(current, target):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none"
        raise InvalidTransition(
            f"session cannot go from {current} to {target} (allowed: {allowed})",
            current=str(current),
            target=str(target),
        )


def parse_state(raw: str) -> SessionState:
    """A state name (case-insensitive) -> SessionState; InvalidTransition for unknown names."""
    try:
        return SessionState(raw.strip().upper())
    except ValueError:
        raise InvalidTransition(
            f"unknown session state {raw!r}; use one of {[s.value for s in SessionState]}"
        ) from None


async def get_state(pool: Pool, session_id: str) -> SessionState:
    """The session's current state; SessionNotFound when there is no such session."""
    async with db_errors("read session state", "DB_READ_ERROR"):
        raw = await pool.fetchval(QUERIES["get_session_state"], session_id)
    if raw is None:
        raise SessionNotFound(f"Session not found: {session_id}", session_id=session_id)
    return SessionState(raw)


async def set_state(pool: Pool, session_id: str, state: SessionState | str) -> SessionState:
    """Move the session to ``state``; returns the previous state.

    Also stamps ``started_at`` (first RESEARCHING) and ``finished_at`` (set on a terminal
    state, cleared when the session is reopened). Raises InvalidTransition or
    SessionNotFound; the row is unchanged then.
    """
    target = state if isinstance(state, SessionState) else parse_state(state)
    sources = sorted(sources_of(target))
    for _ in range(3):
        async with db_errors("save session state", "DB_WRITE_ERROR"):
            previous = await pool.fetchval(
                QUERIES["set_session_state"], session_id, target.value, sources, target in TERMINAL
            )
        if previous is not None:
            return SessionState(previous)
        # Refused: say why (unknown session, or a move the machine does not allow) ...
        check_transition(await get_state(pool, session_id), target)
        # ... or another writer moved the session in between to a state we may leave: retry.
    raise InvalidTransition(f"session {session_id} keeps changing state; retry later")
