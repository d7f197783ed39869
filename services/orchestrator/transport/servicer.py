"""AgentRuntime gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from codelab.v1 import common_pb2 as common
from codelab.v1 import runtime_pb2 as pb
from codelab.v1 import runtime_pb2_grpc as pb_grpc
from services.common.errors import InvalidInput, LimitReached, ServiceError
from services.common.logs import log_context
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.errors import MissingField
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.session.runtime import Runtime
from services.orchestrator.state.hub import SessionHub, Subscription
from services.orchestrator.state.store import SessionRow, SessionStore
from services.orchestrator.turn.executors.plans import estimate
from services.orchestrator.turn.ledger import Ledger
from services.orchestrator.turn.records import Records

log = logging.getLogger(__name__)
BUSY_POLICIES = frozenset({"", "enqueue", "reject", "interrupt"})
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentRuntime"].full_name
ATTACH_TIMEOUT = 30.0


PACK_BYTES = 1 << 20
_THEN = b"\xf2\x01"  # field 30 (ServerEvent.then), length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def pack_events(events: list[bytes]) -> list[bytes]:
    """Serialized events -> as few serialized ServerEvent messages as fit ``PACK_BYTES``:
    the first of each message carries the others in ``then`` (appending an encoded
    repeated field to an encoded message is valid protobuf, so nothing is re-encoded)."""
    messages: list[bytes] = []
    head: bytes | None = None
    rest: list[bytes] = []
    size = 0
    for event in events:
        if head is not None and size + len(event) > PACK_BYTES:
            messages.append(head + b"".join(rest))
            head = None
        if head is None:
            head, rest, size = event, [], len(event)
            continue
        rest.append(_THEN + _varint(len(event)) + event)
        size += len(event)
    if head is not None:
        messages.append(head + b"".join(rest))
    return messages


def _serialized(message: bytes | common.ServerEvent) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


class _Registrations:
    """Stands in for a server to catch the handlers the generated code would register."""

    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        return None

    def add_registered_method_handlers(
        self, name: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = handlers


def add_runtime_servicer(servicer: AgentRuntimeServicer, server: aio.Server) -> None:
    """The generated registration, except that Stream sends events already serialized
    (they were serialized once, to be committed): no decode and re-encode per client."""
    caught = _Registrations()
    pb_grpc.add_AgentRuntimeServicer_to_server(servicer, caught)
    handlers = dict(caught.handlers)
    handlers["Stream"] = handlers["Stream"]._replace(response_serializer=_serialized)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def limit_rejection(limited: LimitReached) -> common.ClientMessage:
    """A message refused by a limit, delivered as a rejection so the error (with its
    retry_after) reaches the session's clients in order, with a seq."""
    return common.ClientMessage(
        rejected=common.Rejected(
            error_code=common.ErrorCode.Value(limited.code),
            content=limited.message,
            details_json=json.dumps(limited.details),
        )
    )


def failed(task: asyncio.Task[None]) -> bool:
    """The task ended with an exception (not cancelled, not finished cleanly)."""
    return task.done() and not task.cancelled() and task.exception() is not None


def session_to_proto(row: SessionRow) -> pb.Session:
    return pb.Session(
        session_id=row.session_id,
        title=row.title,
        created_at=row.created_at.isoformat(),
        last_activity=row.last_activity.isoformat(),
        is_active=not row.deleted,
        message_count=row.message_count,
        current_agent=row.current_agent,
        user_id=row.user_id,
        busy_policy=row.busy_policy,
        tool_schema_tokens_offered=row.tool_tokens_offered,
        tool_schema_tokens_all=row.tool_tokens_all,
    )


class AgentRuntimeServicer(pb_grpc.AgentRuntimeServicer):
    """The IDE Stream and the session queries."""

    def __init__(
        self,
        runtime: Runtime,
        hub: SessionHub,
        store: SessionStore,
        ledger: Ledger,
        agents: AgentRegistry,
        hitl: HitlClient,
    ) -> None:
        self.runtime = runtime
        self.hub = hub
        self.store = store
        self.ledger = ledger
        self.agents = agents
        self.hitl = hitl

    async def Stream(
        self,
        request_iterator: AsyncIterator[common.ClientMessage],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[common.ServerEvent]:
        # The response headers go now, not with the first event: a call opened ahead (the
        # gateway's spare) has them before it is used, so a new session's first token
        # crosses gRPC's core as a message alone (decisions.md, "A Stream's headers").
        await context.send_initial_metadata(())
        try:
            async with asyncio.timeout(ATTACH_TIMEOUT):  # (not wait_for: no task of its own)
                first = await anext(request_iterator)
        except (StopAsyncIteration, TimeoutError):
            raise MissingField("the stream must start with attach") from None
        if first.WhichOneof("message") != "attach" or not first.attach.session_id:
            raise MissingField("the stream must start with attach{session_id}")
        if first.attach.first.HasField("attach"):
            raise InvalidInput("attach.first is the stream's first message, not an attach")
        sid, user = first.attach.session_id, first.attach.user_id
        leases = self.runtime.leases
        leases.attached(sid)  # taken beside the check: the first message finds it owned
        try:
            async for message in self._follow(sid, user, first.attach, request_iterator):
                yield message  # type: ignore[misc]  # serialized (see add_runtime_servicer)
        finally:
            await asyncio.shield(leases.detached(sid))

    async def _follow(
        self,
        sid: str,
        user: str,
        attach: common.Attach,
        request_iterator: AsyncIterator[common.ClientMessage],
    ) -> AsyncIterator[bytes]:
        """The attached stream: the session checked and subscribed to, the client's
        messages submitted, the session's events sent."""
        with log_context(session_id=sid):
            # The first message is read while the session is checked and subscribed to (the
            # three are independent); none is applied before the check passes.
            attached = asyncio.Event()
            subscription: Subscription | None = None

            async def read() -> None:
                if attach.HasField("first"):
                    await handle(attach.first)
                async for message in request_iterator:
                    await handle(message)

            async def handle(message: common.ClientMessage) -> None:
                await attached.wait()
                try:
                    try:
                        await self.runtime.admit(user, message)
                    except LimitReached as limited:
                        message = limit_rejection(limited)
                    await self.runtime.submit(sid, user, message, answer=False)
                except ServiceError as error:
                    # Not accepted (Postgres away, the owner unreachable): this client
                    # is told, the stream goes on hearing it.
                    log.warning("message refused", extra={"fields": {"err": error.message}})
                    self.runtime.refuse(sid, message, error, only=subscription)

            if attach.HasField("first"):  # a new session's first turn: its request now
                served = self.runtime.serving(sid)
                self.runtime.early.before_attach(sid, user, attach, attach.first, served)
            reader = asyncio.create_task(read(), name=f"stream-reader:{sid}")
            try:
                subscription = await self._attach(sid, user, attach)
            except BaseException:
                reader.cancel()
                await asyncio.wait([reader])
                self.runtime.early.drop(sid)
                raise
            if attach.last_seq >= 0:
                # A reconnecting IDE may have lost a tool_call it never ran: each unanswered
                # one is sent again after the replay, outside the log, with the same call_id.
                for event in await self.runtime.resend_dispatched(sid):
                    self.hub.tell(sid, event, only=subscription)
            attached.set()
            end = subscription.end
            reader.add_done_callback(lambda task: end() if failed(task) else None)
            try:
                async for ready in subscription:
                    for message in pack_events(ready):
                        yield message
            finally:
                subscription.close()
                reader.cancel()
                await asyncio.wait([reader])
            if failed(reader):
                log.error("stream reader failed", exc_info=reader.exception())
                raise ServiceError("the stream stopped reading; reconnect to go on")

    async def _attach(self, sid: str, user: str, attach: common.Attach) -> Subscription:
        """Check (or create) the session and subscribe to it: a subscription that turns
        out not to be the caller's is closed before it delivers anything. Registered
        before the attach's statement, whose snapshot gives a new stream's start (the
        log's last seq): what commits later reaches the subscription, nothing is read
        twice, and the stream costs no statement of its own."""
        subscription = self.hub.watch(sid)
        try:
            last = await self.runtime.attach(sid, user, attach.title, attach.system_prompt)
        except BaseException:
            subscription.close()
            raise
        if attach.last_seq >= 0:  # a client resuming: the log after its last event first
            subscription.start_after(attach.last_seq, replay=True)
        else:
            subscription.start_after(last, replay=False)
        return subscription

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Session:
        if request.busy_policy not in BUSY_POLICIES:
            raise InvalidInput(
                f"busy_policy must be one of {sorted(BUSY_POLICIES - {''})}",
                code="MISSING_REQUIRED_FIELD",
            )
        sid = request.session_id or f"session-{uuid.uuid4().hex}"
        await self.runtime.limits.admit_session(
            sid, request.user_id, self.agents.entry, request.title, request.system_prompt
        )
        row, _ = await self.store.ensure_session(
            sid, request.user_id, request.title, request.system_prompt, self.agents.entry
        )
        if request.HasField("metadata_json"):
            try:
                metadata = json.loads(request.metadata_json)
            except ValueError:
                metadata = None
            if not isinstance(metadata, dict):
                raise InvalidInput("metadata must be a JSON object", code="MISSING_REQUIRED_FIELD")
            await self.store.set_context_metadata(sid, metadata)
        if request.busy_policy and request.busy_policy != row.busy_policy:
            await self.store.set_busy_policy(sid, request.busy_policy)
            row = await self.store.get_session(sid, request.user_id)
        return session_to_proto(row)

    async def GetSession(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Session:
        if not request.session_id:
            raise MissingField("session_id is required")
        return session_to_proto(await self.store.get_session(request.session_id, request.user_id))

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListSessionsResponse:
        limit = request.limit if 0 < request.limit <= 1000 else 100
        rows = await self.store.list_sessions(request.user_id, limit)
        return pb.ListSessionsResponse(sessions=[session_to_proto(r) for r in rows])

    async def GetHistory(
        self, request: pb.GetHistoryRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.History:
        if not request.session_id:
            raise MissingField("session_id is required")
        await self.store.get_session(request.session_id, request.user_id)
        history = pb.History(session_id=request.session_id)
        for m in await self.store.history(request.session_id):
            item = history.messages.add(
                role=m.role,
                content=m.content,
                timestamp=m.created_at.isoformat() if m.created_at else "",
            )
            if m.name:
                item.name = m.name
            if m.tool_call_id:
                item.tool_call_id = m.tool_call_id
            for call in m.tool_calls or ():
                item.tool_calls.add(
                    id=call["id"], name=call["name"], arguments_json=call["arguments"]
                )
        return history

    async def DeleteSession(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DeleteSessionResponse:
        await self.store.get_session(request.session_id, request.user_id)
        deleted = await self.store.soft_delete(request.session_id, request.user_id)
        return pb.DeleteSessionResponse(session_id=request.session_id, deleted=deleted)

    async def Submit(
        self, request: pb.SubmitRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SubmitResponse:
        if not request.session_id or not request.message.WhichOneof("message"):
            raise MissingField("session_id and message are required")
        await self.runtime.attach(request.session_id, request.user_id)
        await self.runtime.admit(request.user_id, request.message)
        status = await self.runtime.submit(request.session_id, request.user_id, request.message)
        return pb.SubmitResponse(status=status)

    async def Cancel(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SubmitResponse:
        await self.store.get_session(request.session_id, request.user_id)
        message = common.ClientMessage(cancel=common.Cancel())
        await self.runtime.submit(request.session_id, request.user_id, message)
        return pb.SubmitResponse(status="accepted")

    async def GetSessionRecords(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SessionRecords:
        await self.store.get_session(request.session_id, request.user_id)
        records = await Records(self.store.pool).of_session(request.session_id)
        return pb.SessionRecords(
            session_id=request.session_id, records_json=json.dumps(records, default=str)
        )

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListAgentsResponse:
        return pb.ListAgentsResponse(agents=[agent_info(t) for t in self.agents.all()])

    async def GetCurrentAgent(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.CurrentAgent:
        row = await self.store.get_session(request.session_id, request.user_id)
        name = row.current_agent if self.agents.has(row.current_agent) else self.agents.entry
        return pb.CurrentAgent(
            session_id=row.session_id,
            current_agent=name,
            switch_count=row.switch_count,
            last_switch_at=row.last_switch_at.isoformat() if row.last_switch_at else "",
            agent=agent_info(self.agents.get(name)),
        )

    async def ListPendingApprovals(
        self, request: pb.GetSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.PendingApprovals:
        await self.store.get_session(request.session_id, request.user_id)
        reply = pb.PendingApprovals(session_id=request.session_id)
        for approval in await self.hitl.pending(request.session_id):
            call = await self.ledger.find(request.session_id, approval.call_id)
            if call is None or call.state != "awaiting_approval":
                continue  # cancelled in the runtime while hitl still had it pending
            reply.pending_approvals.add(
                type="tool_approval",
                call_id=approval.call_id,
                tool_name=approval.tool_name,
                arguments_json=approval.arguments_json,
                reason=approval.reason,
                created_at=approval.created_at,
                expires_at=approval.expires_at,
                timeout_seconds=approval.timeout_seconds,
            )
        for plan in await self.ledger.pending_plans(request.session_id):
            reply.pending_approvals.add(
                type="plan_approval",
                call_id=plan.call_id,
                approval_request_id=plan.approval_request_id,
                plan_id=plan.plan_id,
                reason="plan approval",
                created_at=plan.created_at.isoformat() if plan.created_at else "",
                plan_summary=common.PlanSummary(
                    goal=plan.goal,
                    subtasks_count=len(plan.steps),
                    total_estimated_time=estimate(plan.steps),
                ),
            )
        return reply

    async def GetEventStats(
        self, request: pb.EventStatsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EventStats:
        totals, by_type = await self.store.event_stats()
        return pb.EventStats(
            total_events=totals.get("total_events", 0),
            events_by_type=by_type,
            sessions=totals.get("sessions", 0),
            active_sessions=totals.get("active_sessions", 0),
            agent_switches=totals.get("agent_switches", 0),
        )


def agent_info(template: AgentTemplate) -> pb.AgentInfo:
    return pb.AgentInfo(
        agent_type=template.name,
        name=template.display_name,
        description=template.description,
        allowed_tools=list(template.allowed_tools),
        file_restrictions=list(template.file_restrictions),
        has_file_restrictions=bool(template.file_restrictions),
    )
