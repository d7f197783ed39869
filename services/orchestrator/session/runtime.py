"""Routes the IDE's messages to one worker per owned session: one at a time, in order.

Work runs in the worker, not in the Stream that delivered the message, so a client
that disconnects does not stop its turn; the events wait in the log. A replica that
does not own a session hands the message to the owner (see ownership.py). A busy
session treats a new user_message by its policy: enqueue (default), reject, interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from codelab.v1 import common_pb2 as pb
from services.common.errors import ServiceError
from services.common.logs import log_context
from services.orchestrator import spans
from services.orchestrator.agents.agent_instance import SCRATCH
from services.orchestrator.agents.instances import InstancePool
from services.orchestrator.agents.templates import AgentRegistry
from services.orchestrator.metrics import SESSIONS_ACTIVE
from services.orchestrator.peers.mesh_clients import Expired, HitlClient
from services.orchestrator.session.client_ids import ClientIds, client_message_id, kind_of
from services.orchestrator.session.early_turns import EarlyTurns
from services.orchestrator.session.inputs import Inputs, history_entry
from services.orchestrator.session.leases import Leases
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.session.ownership import Ownership
from services.orchestrator.session.tool_timeouts import TimedOut, ToolTimeouts
from services.orchestrator.state import events
from services.orchestrator.state.hub import SessionHub, Subscription
from services.orchestrator.state.session_states import TERMINAL, SessionState, sources_of
from services.orchestrator.state.store import Repeated, SessionStore, TurnStart, Unclaimed
from services.orchestrator.turn.executors.ide import tool_call_event
from services.orchestrator.turn.executors.plans import PlanDecision

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
LIMIT_CODES = frozenset({"RATE_LIMITED", "BUDGET_EXCEEDED"})
Item = pb.ClientMessage | Expired | TimedOut
DONE_STATES = {
    "completed": SessionState.COMPLETED,
    "awaiting_user": SessionState.WAITING_FOR_CLARIFICATION,
    "error": SessionState.FAILED,
    "cancelled": SessionState.CANCELLED,
}


def _details(raw: str) -> dict[str, Any] | None:
    """A rejection's details: a JSON object, or nothing (a client may send anything)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _answered_call(item: Item) -> str | None:
    """The call a tool result answers (read with the turn's start)."""
    if isinstance(item, pb.ClientMessage) and item.HasField("tool_result"):
        return item.tool_result.call_id
    return None


_PLAN_DECISIONS = {
    pb.DECISION_APPROVE: "approve",
    pb.DECISION_REJECT: "reject",
    pb.DECISION_MODIFY: "modify",
}


def plan_decision(message: pb.PlanDecision) -> PlanDecision:
    """The IDE's plan decision as the plan runner reads it."""
    feedback = message.feedback if message.HasField("feedback") else None
    name = _PLAN_DECISIONS.get(message.decision, "unknown")
    return PlanDecision(message.approval_request_id, name, feedback)


class Runtime:
    """The orchestrator's domain entry point."""

    def __init__(
        self,
        store: SessionStore,
        hub: SessionHub,
        inputs: Inputs,
        agents: AgentRegistry,
        hitl: HitlClient,
        ownership: Ownership,
        instances: InstancePool,
        limits: UserLimits,
        client_ids: ClientIds,
        timeouts: ToolTimeouts,
        *,
        sweep_every: float = 1.0,
        retention_days: float = 30.0,
    ) -> None:
        self.store = store
        self.hub = hub
        self.inputs = inputs
        self.agents = agents
        self.hitl = hitl
        self.ownership = ownership
        self.instances = instances
        self.limits = limits
        self.client_ids = client_ids
        self.timeouts = timeouts
        self.sweep_every = sweep_every
        self.retention_days = retention_days
        self._inboxes: dict[str, asyncio.Queue[tuple[str, Item]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancelling: set[str] = set()
        """Sessions whose running task handles a cancel: a second cancel waits its turn."""
        self._live: dict[str, set[str]] = {}
        """Client message ids claimed here and not yet handled to the end."""
        self._unclaimed: dict[str, set[str]] = {}
        """Ids of user messages queued here unclaimed: their turn's start claims them."""
        self._handling: dict[str, tuple[str, int]] = {}
        """(client message id, first seq) of the user message each session is handling."""
        self._background: list[asyncio.Task[None]] = []
        self.early = EarlyTurns(inputs.loop.llm, agents, limits)
        self.leases = Leases(ownership, self._take, lambda sid: sid in self._workers)

    async def start(self) -> None:
        self.ownership.presence.hub = self.hub  # commits notify only while others live
        await self.ownership.start()
        self.ownership.on_inbox = lambda sid: self._spawn(self._drain(sid))
        self.ownership.on_events = self._nudge
        self._background = [
            asyncio.create_task(self._every(self.sweep_every, self._expire), name="expiry"),
            asyncio.create_task(self._every(self.sweep_every, self._time_out), name="timeouts"),
            asyncio.create_task(self._every(2.0, self._take_over), name="takeover"),
            asyncio.create_task(self._every(3600.0, self._purge), name="retention"),
        ]

    def _nudge(self, session_id: str, seq: int) -> None:
        """Another replica committed events: wake this one's subscribers. The owner wrote
        the session's events itself and delivered them already: its own notifications
        would only make its subscribers re-read what they have."""
        if session_id not in self.ownership.owned:
            self.hub.nudge(session_id, seq)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.append(task)
        task.add_done_callback(self._background.remove)

    async def attach(
        self, session_id: str, user_id: str, title: str = "", system_prompt: str = ""
    ) -> int:
        """The session the stream binds to, created on first use (within the user's
        sessions-open limit) with ``title`` and ``system_prompt``; returns the last seq
        of its log, read after the call began."""
        entry = self.agents.entry
        await self.limits.admit_session(session_id, user_id, entry, title, system_prompt)
        attached = await self.store.attach(session_id, user_id, entry, title, system_prompt)
        # The usage of its model calls is the owner's.
        self.limits.owner_is(session_id, attached.owner)
        self.early.attached(session_id, attached.last_seq, attached.system_prompt)
        return attached.last_seq

    async def admit(self, user_id: str, message: pb.ClientMessage) -> None:
        """Raise RateLimited when a user message passes the user's messages per minute."""
        if message.WhichOneof("message") == "user_message":
            await self.limits.admit_message(user_id)

    async def submit(
        self, session_id: str, user_id: str, item: Item, *, answer: bool = True
    ) -> str:
        """Deliver one message to the session's owner (this replica when it can be):
        ``accepted``, or ``duplicate`` for a repeated client message id seen here.
        ``answer`` False: the caller does not read the answer (a stream), so an idle
        session's user message is claimed by its turn's first statement, not before."""
        spans.stamp(item)
        if await self._own(session_id):
            return await self._local(session_id, user_id, item, answer=answer)
        self.early.drop(session_id)  # the owner's turn asks on its own
        if isinstance(item, pb.ClientMessage):
            await self.ownership.post(session_id, user_id, item)
        return "accepted"

    async def _own(self, sid: str) -> bool:
        """Own the session (see leases.py)."""
        return await self.leases.own(sid)

    async def _take(self, sid: str) -> bool:
        """Take the session's lease (False: another live replica owns it) and recover
        what the last owner left."""
        await self.hub.reset(sid)  # what this process emitted is committed before the read
        left = await self.ownership.take(sid)
        if left is None:
            return False
        self.hub.adopt(sid, left.last_seq)
        running = left.turn_state == "running"
        if running:
            await self.store.set_turn_state(sid, "idle")
        if running and await self.store.last_event_type(sid) != "done":
            # The previous owner died mid-turn (its last word was not `done`): say so; the
            # session goes on from its ledger.
            await self.hub.emit(
                sid,
                events.error(
                    "LLM_STREAM_INTERRUPTED",
                    "the runtime restarted during this turn; "
                    "open tool calls and approvals still stand",
                ),
            )
            await self.hub.emit(sid, events.done("error"))
        for user_id, message in await self.ownership.take_inbox(sid) if left.posted else ():
            await self._local(sid, user_id, message, answer=False)
        return True

    async def _drain(self, sid: str) -> None:
        if await self._own(sid):
            for user_id, message in await self.ownership.take_inbox(sid):
                await self._local(sid, user_id, message, answer=False)

    async def _local(self, sid: str, user_id: str, item: Item, *, answer: bool) -> str:
        cid = client_message_id(item)
        if cid is not None and cid in self._unclaimed.get(sid, ()):
            # Its first delivery waits here to begin (and claim the id): a repeat.
            await self._duplicate(sid, cid, None)
            return "duplicate"
        running = self._running.get(sid)
        busy = running is not None and not running.done()
        inbox = self._inboxes.get(sid)
        if (
            cid is not None
            and not answer
            and not busy
            and (inbox is None or inbox.empty())
            and kind_of(item) == "user_message"
            and cid not in self._live.get(sid, ())
        ):
            # The turn starts at once: its begin_turn claims the id, one round trip less
            # before the model call.
            self._unclaimed.setdefault(sid, set()).add(cid)
        elif cid is not None and not await self._claim(sid, cid, kind_of(item)):
            return "duplicate"
        if isinstance(item, pb.ClientMessage):
            kind = item.WhichOneof("message")
            # A cancel interrupts a running turn, but not a cancel being handled (it would
            # lose both answers): that one goes through the inbox like an idle cancel.
            if kind == "cancel" and busy and sid not in self._cancelling:
                await self._started(sid, cid)
                running = self._running.get(sid)
                if running is not None and not running.done():
                    # The worker sees the interrupted task and closes the turn itself; a
                    # cancel that comes before it has goes through the inbox.
                    running.cancel()
                    self._cancelling.add(sid)
                    self._live.get(sid, set()).discard(cid or "")
                    return "accepted"
                # The turn ended meanwhile: an idle session's cancel, through the inbox.
            elif kind == "user_message" and busy:
                policy = (await self.store.get_session(sid)).busy_policy
                if policy == "reject":
                    self._live.get(sid, set()).discard(cid or "")
                    if cid is not None:
                        await self.client_ids.forget(sid, cid)  # refused: a resend may apply
                    await self.hub.emit(
                        sid,
                        events.refused(
                            "TURN_IN_PROGRESS",
                            "a turn is running; wait for done or cancel it",
                            cid,
                        ),
                    )
                    return "accepted"
                if policy == "interrupt":
                    assert running is not None
                    running.cancel()
        if not busy and (inbox is None or inbox.empty()) and isinstance(item, pb.ClientMessage):
            self.early.arrived(sid, item)
        if inbox is None:
            inbox = self._inboxes[sid] = asyncio.Queue()
            self._workers[sid] = asyncio.create_task(self._work(sid, inbox), name=f"session:{sid}")
        inbox.put_nowait((user_id, item))
        return "accepted"

    def serving(self, sid: str) -> bool:
        """A worker of this process serves the session now."""
        return sid in self._workers

    async def _claim(self, sid: str, cid: str, kind: str) -> bool:
        """True when the message is to be applied; a repeat is answered here instead."""
        claim = await self.client_ids.claim(sid, cid, kind)
        live = self._live.setdefault(sid, set())
        waiting = cid in live or cid in self._unclaimed.get(sid, ())
        if claim.fresh or not (claim.started or waiting):
            live.add(cid)
            return True
        await self._duplicate(sid, cid, claim.first_seq)
        return False

    async def _duplicate(self, sid: str, cid: str, first_seq: int | None) -> None:
        """Tell the clients that message ``cid`` was delivered before (where its events
        start, when known)."""
        handling = self._handling.get(sid)
        first = first_seq or (handling[1] if handling and handling[0] == cid else None)
        await self.hub.emit(sid, events.duplicate(cid, first or await self.hub.next_seq(sid)))

    async def _started(self, sid: str, cid: str | None, item: Item | None = None) -> None:
        """Handling of client message ``cid`` begins: its events start at the next seq. A
        user message is marked started when it is stored (``_handling``), in the same commit:
        a process dying before that leaves the claim open, and a resend is applied."""
        if cid is None:
            return
        first = await self.hub.next_seq(sid)
        if isinstance(item, pb.ClientMessage) and item.HasField("user_message"):
            self._handling[sid] = (cid, first)
        else:
            await self.client_ids.start(sid, cid, first)

    async def _work(self, sid: str, inbox: asyncio.Queue[tuple[str, Item]]) -> None:
        SESSIONS_ACTIVE.inc()
        with log_context(session_id=sid):
            try:
                while True:
                    try:
                        # Not wait_for: in 3.11 it runs the get in a task of its own, one
                        # loop turn more before a message that is there already is handled.
                        async with asyncio.timeout(IDLE_SECONDS):
                            user_id, item = await inbox.get()
                    except TimeoutError:
                        if inbox.empty():
                            return
                        continue
                    try:
                        await self._run_one(sid, user_id, item)
                    except ServiceError as error:
                        # Postgres may be restarting: the client is told without the log;
                        # the worker lives on for the next message.
                        log.warning("message failed", extra={"fields": {"err": error.message}})
                        self.refuse(sid, item, error)
            finally:
                SESSIONS_ACTIVE.dec()
                self._inboxes.pop(sid, None)
                self._workers.pop(sid, None)
                self._running.pop(sid, None)
                self._live.pop(sid, None)
                self._unclaimed.pop(sid, None)
                self.early.ended(sid)
                self.hub.forget(sid)
                await self.leases.let_go(sid)

    def refuse(
        self, sid: str, item: Item, error: ServiceError, only: Subscription | None = None
    ) -> None:
        """Tell the session's clients (or ``only`` one) that a client message could not be
        accepted, and end it: an error with its id, then ``done`` error (nothing logged:
        Postgres may be what failed)."""
        if isinstance(item, pb.ClientMessage):
            cid = item.client_message_id if item.HasField("client_message_id") else None
            self.hub.tell(sid, events.refused(error.code, error.message, cid), only)
            self.hub.tell(sid, events.done("error"), only)

    @spans.turn
    async def _run_one(self, sid: str, user_id: str, item: Item) -> None:
        cid = client_message_id(item)
        unclaimed = cid is not None and cid in self._unclaimed.get(sid, ())
        marked = not unclaimed  # a claimed message is live already; an unclaimed one once begun
        if isinstance(item, pb.ClientMessage):
            self.early.handling(sid, item)
        try:
            await self._started(sid, cid, item)
            begun = await self._begin(sid, item, cid if unclaimed else None)
            if begun is None:
                return  # a repeat: answered, nothing began
            marked = True
            await self._run_begun(sid, user_id, item, begun)
        finally:
            self.early.finished(sid, item)
            self._handling.pop(sid, None)
            if marked:
                self._live.get(sid, set()).discard(cid or "")

    async def _begin(self, sid: str, item: Item, unclaimed: str | None) -> TurnStart | None:
        """The turn's first statement (claiming ``unclaimed`` in it); None when that id was
        delivered before and this delivery is not to be applied (answered here)."""
        research = SessionState.RESEARCHING
        # A user message's first model call needs the history and the hand-over context:
        # the same statement reads them.
        is_user = isinstance(item, pb.ClientMessage) and item.HasField("user_message")
        said = item.user_message if isinstance(item, pb.ClientMessage) else None
        user = history_entry(said) if said is not None else None
        # (None for anything but a user message with content: its handling refuses that.)
        claim = None
        if unclaimed is not None:
            claim = Unclaimed(unclaimed, kind_of(item), unclaimed in self._live.get(sid, ()))
        start: TurnStart | Repeated | None = None
        try:
            start = await self.store.begin_turn(
                sid,
                research.value if self._starts_task(item) else None,
                [state.value for state in sources_of(research)],
                claim,
                _answered_call(item),
                read_context=is_user,
                user=user,
                applies=self._handling.get(sid) if is_user else None,
                ahead=self.inputs.ahead(said) if is_user and said is not None else None,
            )
        finally:
            # No await between this and the live mark below: a repeat sees the id either
            # unclaimed or live.
            self._unclaimed.get(sid, set()).discard(unclaimed or "")
        if isinstance(start, Repeated):
            assert unclaimed is not None
            await self._duplicate(sid, unclaimed, start.first_seq)
            return None
        if unclaimed is not None:
            self._live.setdefault(sid, set()).add(unclaimed)
        return start

    async def _run_begun(self, sid: str, user_id: str, item: Item, start: TurnStart) -> None:
        loop = self.inputs.loop
        loop.begin(sid, start)
        before = start.before()  # (the agent that had the session when the message came)
        agent = before.current_agent
        version = before.agent_versions.get(agent)
        agent = agent if self.agents.has(agent) or version else self.agents.entry
        try:
            # A pooled instance serves the session while this message is handled; its
            # scratch state is wiped when it goes back to the pool (no leaks between sessions).
            # A task goes on with the version it started on, whatever an admin wrote since.
            pinned = await self.agents.pinned(self.store.pool, agent, version) if version else None
            async with self.instances.lease(agent, sid, pinned=pinned) as instance:
                token = SCRATCH.set(instance.scratch)
                try:
                    await self._handle_in_task(sid, user_id, item)
                finally:
                    SCRATCH.reset(token)
        finally:
            counts = loop.end(sid)
        status = loop.take_last_done(sid)
        target = DONE_STATES.get(status)
        if target is not None:
            loop.turn_over(sid)
        await self.store.end_turn(
            sid,
            target.value if target else None,
            [state.value for state in sources_of(target)] if target else [],
            target in TERMINAL,
            counts,
        )

    @staticmethod
    def _starts_task(item: Item) -> bool:
        if not isinstance(item, pb.ClientMessage):
            return False
        kind = item.WhichOneof("message")
        return kind == "user_message" or (
            kind == "switch_agent" and bool(item.switch_agent.content.strip())
        )

    async def _handle_in_task(self, sid: str, user_id: str, item: Item) -> None:
        task = asyncio.create_task(self._handle(sid, user_id, item))
        self._running[sid] = task
        if self._is_cancel(item):
            self._cancelling.add(sid)
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the worker itself is stopped (shutdown): not the user's cancel
        except Exception:
            # A bug, not an expected failure: log it, tell the client, keep the session usable.
            log.exception("message handling crashed")
            await self.inputs.fail(sid, "INTERNAL_ERROR", "the runtime failed on this message")
        finally:
            self._cancelling.discard(sid)
            # Handled (its done is out): no longer live, so a resend is answered by its claim
            # alone (applied when the message was never stored) even before the turn's end
            # is written.
            self._live.get(sid, set()).discard(client_message_id(item) or "")
        if task.cancelled() and not self._is_cancel(item):
            await self.inputs.cancelled(sid)

    @staticmethod
    def _is_cancel(item: Item) -> bool:
        return isinstance(item, pb.ClientMessage) and item.WhichOneof("message") == "cancel"

    async def _handle(self, sid: str, user_id: str, item: Item) -> None:
        inputs = self.inputs
        try:
            if isinstance(item, Expired):
                await inputs.expired(item)
                return
            if isinstance(item, TimedOut):
                await inputs.timed_out(item)
                return
            kind = item.WhichOneof("message")
            if kind == "user_message":
                await inputs.user_message(sid, item.user_message, self._handling.get(sid))
            elif kind == "tool_result":
                await inputs.tool_result(sid, item.tool_result, user_id)
            elif kind == "hitl_decision":
                await inputs.hitl_decision(sid, user_id, item.hitl_decision)
            elif kind == "plan_decision":
                await inputs.plans.decide(sid, user_id, plan_decision(item.plan_decision))
            elif kind == "switch_agent":
                await inputs.switch_agent(sid, item.switch_agent)
            elif kind == "cancel":
                await inputs.cancelled(sid)
            elif kind == "rejected":
                await self._rejected(sid, item.rejected)
            else:
                await inputs.fail(sid, "INVALID_MESSAGE_TYPE", f"{kind} is not accepted here")
        except ServiceError as failure:
            await inputs.fail(sid, failure.code, failure.message)

    async def _rejected(self, sid: str, rejected: pb.Rejected) -> None:
        """A message refused before it reached the session (bad input, a limit)."""
        number = rejected.error_code
        known = number != pb.ERROR_CODE_UNSPECIFIED and number in pb.ErrorCode.values()
        code = pb.ErrorCode.Name(number) if known else "INVALID_MESSAGE_TYPE"
        details = _details(rejected.details_json) if rejected.HasField("details_json") else None
        await self.hub.emit(sid, events.error(code, rejected.content, details))
        if code in LIMIT_CODES:
            # The refused message was a request for a turn: the client waits for its end.
            await self.hub.emit(sid, events.done("error"))

    async def _every(self, seconds: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except ServiceError as error:
                log.warning("background job failed", extra={"fields": {"err": error.message}})
            except Exception:
                # A bug in a job must not end the job for the life of the process.
                log.exception("background job crashed")

    async def _expire(self) -> None:
        """Hand expired approvals to their sessions' owners."""
        for expired in await self.hitl.expire_due():
            if await self._own(expired.session_id):
                await self._local(expired.session_id, "", expired, answer=False)
            else:
                # Another replica owns the session and hitl will not list this approval
                # again: relay a decision, which hitl answers HITL_TIMEOUT, so the owner
                # handles the expiry on its usual path.
                decision = pb.HitlDecision(call_id=expired.call_id, decision=pb.DECISION_REJECT)
                await self.ownership.post(
                    expired.session_id, "", pb.ClientMessage(hitl_decision=decision)
                )

    async def _time_out(self) -> None:
        """Close overdue tool calls of the sessions this replica owns (or can take);
        another replica's are its own sweep's."""
        for due in await self.timeouts.overdue():
            if await self._own(due.session_id):
                await self._local(due.session_id, "", due, answer=False)

    async def resend_dispatched(self, session_id: str) -> list[pb.ServerEvent]:
        """The tool_call of every dispatched, unanswered call, as first sent: for an IDE
        that reconnects and may have lost one. No ``done`` follows: the runtime already
        said it waits, and an IDE that kept the call must not read this as a new turn."""
        calls = await self.inputs.loop.ledger.open_calls(session_id)
        sent = [
            tool_call_event(call, call.arguments, False, call.reason)
            for call in calls
            if call.state == "dispatched" and isinstance(call.arguments, dict)
        ]
        return sent

    async def _take_over(self) -> None:
        """Sessions whose owner died: messages waiting, or a turn cut off."""
        for sid in {
            *await self.ownership.waiting_sessions(),
            *await self.store.interrupted_turns(),
        }:
            if sid not in self.ownership.owned and sid not in self._workers:
                await self._drain(sid)

    async def _purge(self) -> None:
        await self.limits.prune()
        purged = await self.store.purge_deleted(self.retention_days)
        if purged:
            log.info("purged deleted sessions", extra={"fields": {"count": purged}})

    async def close(self) -> None:
        """Stop background jobs and workers (committed state stays in Postgres)."""
        tasks = [*self._background, *self._workers.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.ownership.close()
