"""Routes the IDE's messages to one worker per session: one at a time, in order.

Work runs in the worker, not in the Stream that delivered the message, so a client
that disconnects does not stop its turn; the events wait in the log. A message that
arrives while another is being handled is queued behind it (never interleaved);
``cancel`` interrupts the running one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from codelab.v1 import common_pb2 as pb
from services.common.errors import ServiceError
from services.common.logs import log_context
from services.orchestrator import events
from services.orchestrator.hub import SessionHub
from services.orchestrator.inputs import Inputs
from services.orchestrator.mesh_clients import Expired, HitlClient
from services.orchestrator.store import SessionRow, SessionStore
from services.orchestrator.templates import AgentRegistry

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
Item = pb.ClientMessage | Expired


class Runtime:
    """The orchestrator's domain entry point."""

    def __init__(
        self,
        store: SessionStore,
        hub: SessionHub,
        inputs: Inputs,
        agents: AgentRegistry,
        hitl: HitlClient,
        sweep_every: float = 1.0,
    ) -> None:
        self.store = store
        self.hub = hub
        self.inputs = inputs
        self.agents = agents
        self.hitl = hitl
        self.sweep_every = sweep_every
        self._inboxes: dict[str, asyncio.Queue[tuple[str, Item]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep(), name="hitl-expiry")

    async def attach(self, session_id: str, user_id: str) -> SessionRow:
        """The session the stream binds to, created on first use."""
        row, _ = await self.store.ensure_session(session_id, user_id, agent=self.agents.entry)
        return row

    async def submit(self, session_id: str, user_id: str, item: Item) -> None:
        """Queue one message for the session's worker (cancel also interrupts at once)."""
        if isinstance(item, pb.ClientMessage) and item.WhichOneof("message") == "cancel":
            running = self._running.get(session_id)
            if running is not None and not running.done():
                running.cancel()
        inbox = self._inboxes.get(session_id)
        if inbox is None:
            inbox = self._inboxes[session_id] = asyncio.Queue()
            self._workers[session_id] = asyncio.create_task(
                self._work(session_id, inbox), name=f"session:{session_id}"
            )
        inbox.put_nowait((user_id, item))

    async def _work(self, sid: str, inbox: asyncio.Queue[tuple[str, Item]]) -> None:
        with log_context(session_id=sid):
            try:
                while True:
                    try:
                        user_id, item = await asyncio.wait_for(inbox.get(), IDLE_SECONDS)
                    except TimeoutError:
                        if inbox.empty():
                            return
                        continue
                    task = asyncio.create_task(self._handle(sid, user_id, item))
                    self._running[sid] = task
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            finally:
                self._inboxes.pop(sid, None)
                self._workers.pop(sid, None)
                self._running.pop(sid, None)
                self.hub.forget(sid)

    async def _handle(self, sid: str, user_id: str, item: Item) -> None:
        inputs = self.inputs
        try:
            if isinstance(item, Expired):
                await inputs.expired(item)
                return
            kind = item.WhichOneof("message")
            if kind == "user_message":
                await inputs.user_message(sid, item.user_message)
            elif kind == "tool_result":
                await inputs.tool_result(sid, item.tool_result)
            elif kind == "hitl_decision":
                await inputs.hitl_decision(sid, user_id, item.hitl_decision)
            elif kind == "plan_decision":
                await inputs.plans.decide(sid, user_id, item.plan_decision)
            elif kind == "switch_agent":
                await inputs.switch_agent(sid, item.switch_agent)
            elif kind == "cancel":
                await inputs.cancelled(sid)
            elif kind == "rejected":
                code = pb.ErrorCode.Name(item.rejected.error_code)
                await self.hub.emit(sid, events.error(code, item.rejected.content))
            else:
                await inputs.fail(sid, "INVALID_MESSAGE_TYPE", f"{kind} is not accepted here")
        except ServiceError as failure:
            await inputs.fail(sid, failure.code, failure.message)

    async def _sweep(self) -> None:
        """Hand expired approvals to their sessions' workers."""
        while True:
            await asyncio.sleep(self.sweep_every)
            try:
                for expired in await self.hitl.expire_due():
                    await self.submit(expired.session_id, "", expired)
            except ServiceError as error:
                log.warning("expiry sweep failed", extra={"fields": {"err": error.message}})

    async def close(self) -> None:
        """Stop the sweeper and every worker (committed state stays in Postgres)."""
        tasks = [t for t in (self._sweeper, *self._workers.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
