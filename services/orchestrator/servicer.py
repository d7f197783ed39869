"""AgentRuntime gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from codelab.v1 import common_pb2 as common
from codelab.v1 import runtime_pb2 as pb
from codelab.v1 import runtime_pb2_grpc as pb_grpc
from services.common.logs import log_context
from services.orchestrator.errors import MissingField
from services.orchestrator.hub import SessionHub
from services.orchestrator.runtime import Runtime
from services.orchestrator.store import SessionRow, SessionStore

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentRuntime"].full_name
ATTACH_TIMEOUT = 30.0


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
    )


class AgentRuntimeServicer(pb_grpc.AgentRuntimeServicer):
    """The IDE Stream and the session queries."""

    def __init__(self, runtime: Runtime, hub: SessionHub, store: SessionStore) -> None:
        self.runtime = runtime
        self.hub = hub
        self.store = store

    async def Stream(
        self,
        request_iterator: AsyncIterator[common.ClientMessage],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[common.ServerEvent]:
        try:
            first = await asyncio.wait_for(anext(request_iterator), ATTACH_TIMEOUT)
        except (StopAsyncIteration, TimeoutError):
            raise MissingField("the stream must start with attach") from None
        if first.WhichOneof("message") != "attach" or not first.attach.session_id:
            raise MissingField("the stream must start with attach{session_id}")
        sid, user = first.attach.session_id, first.attach.user_id
        with log_context(session_id=sid):
            await self.runtime.attach(sid, user)
            subscription = await self.hub.subscribe(sid, first.attach.last_seq)

            async def read() -> None:
                async for message in request_iterator:
                    await self.runtime.submit(sid, user, message)

            reader = asyncio.create_task(read(), name=f"stream-reader:{sid}")
            try:
                async for event in subscription:
                    yield event
            finally:
                subscription.close()
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Session:
        sid = request.session_id or f"session-{uuid.uuid4().hex}"
        row, _ = await self.store.ensure_session(
            sid, request.user_id, request.title, request.system_prompt
        )
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
