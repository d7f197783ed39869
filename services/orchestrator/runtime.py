"""Routes the IDE's messages to one worker per session: one turn at a time.

Turns run in the worker, not in the Stream that delivered the message, so a
client that disconnects does not stop its turn; the events wait in the log.
A user_message arriving during a turn is queued behind it (never interleaved).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from codelab.v1 import common_pb2 as pb
from services.common.errors import ServiceError
from services.common.logs import log_context
from services.orchestrator import events
from services.orchestrator.agents import UNIVERSAL, Agent
from services.orchestrator.hub import SessionHub
from services.orchestrator.store import SessionRow, SessionStore
from services.orchestrator.turn import TurnRunner

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0


class Runtime:
    """The orchestrator's domain entry point."""

    def __init__(self, store: SessionStore, hub: SessionHub, turns: TurnRunner) -> None:
        self.store = store
        self.hub = hub
        self.turns = turns
        self._inboxes: dict[str, asyncio.Queue[pb.ClientMessage]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._turns: dict[str, asyncio.Task[None]] = {}

    async def attach(self, session_id: str, user_id: str) -> SessionRow:
        """The session the stream binds to, created on first use."""
        row, _ = await self.store.ensure_session(session_id, user_id)
        return row

    def agent_for(self, session: SessionRow) -> Agent:
        return UNIVERSAL

    async def submit(self, session_id: str, user_id: str, message: pb.ClientMessage) -> None:
        """Accept one client message for the session's worker."""
        if message.WhichOneof("message") == "cancel":
            turn = self._turns.get(session_id)
            if turn is not None and not turn.done():
                turn.cancel()
            else:
                await self.hub.emit(session_id, events.done("cancelled"))
            return
        inbox = self._inboxes.get(session_id)
        if inbox is None:
            inbox = self._inboxes[session_id] = asyncio.Queue()
            self._workers[session_id] = asyncio.create_task(
                self._work(session_id, user_id, inbox), name=f"session:{session_id}"
            )
        inbox.put_nowait(message)

    async def _work(
        self, session_id: str, user_id: str, inbox: asyncio.Queue[pb.ClientMessage]
    ) -> None:
        with log_context(session_id=session_id):
            try:
                while True:
                    try:
                        message = await asyncio.wait_for(inbox.get(), IDLE_SECONDS)
                    except TimeoutError:
                        if inbox.empty():
                            return
                        continue
                    turn = asyncio.create_task(self._handle(session_id, user_id, message))
                    self._turns[session_id] = turn
                    with contextlib.suppress(asyncio.CancelledError):
                        await turn
                    if turn.cancelled():
                        await self.hub.emit(session_id, events.done("cancelled"))
            finally:
                self._inboxes.pop(session_id, None)
                self._workers.pop(session_id, None)
                self._turns.pop(session_id, None)
                self.hub.forget(session_id)

    async def _handle(self, session_id: str, user_id: str, message: pb.ClientMessage) -> None:
        kind = message.WhichOneof("message")
        try:
            if kind == "user_message":
                await self._user_message(session_id, user_id, message.user_message)
            elif kind == "rejected":
                rejected = message.rejected
                await self.hub.emit(
                    session_id,
                    events.error(pb.ErrorCode.Name(rejected.error_code), rejected.content),
                )
            else:
                await self.hub.emit(
                    session_id,
                    events.error("INVALID_MESSAGE_TYPE", f"{kind} is not accepted here"),
                )
        except ServiceError as failure:
            await self.hub.emit(session_id, events.error(failure.code, failure.message))
            await self.hub.emit(session_id, events.done("error"))

    async def _user_message(self, session_id: str, user_id: str, message: pb.UserMessage) -> None:
        if not message.content.strip():
            await self.hub.emit(
                session_id, events.error("MISSING_REQUIRED_FIELD", "user_message needs content")
            )
            await self.hub.emit(session_id, events.done("error"))
            return
        session = await self.store.get_session(session_id, user_id)
        await self.turns.user_turn(session, self.agent_for(session), message.content)

    async def close(self) -> None:
        """Stop every worker (their committed state stays in Postgres)."""
        for task in list(self._workers.values()):
            task.cancel()
        for task in list(self._workers.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
