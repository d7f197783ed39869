"""Typed async access to the mesh over its generated stubs.

``MeshClient`` owns the channels (internal auth on every call) and exposes the
services' stubs; ``SessionStream`` is one IDE connection's bidirectional Stream.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TypeAlias, cast

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clients.python.ids import ONCE, new_client_id
from codelab.v1 import (
    access_pb2_grpc,
    admin_pb2_grpc,
    hitl_pb2_grpc,
    llmproxy_pb2_grpc,
    runtime_pb2_grpc,
    sources_pb2_grpc,
    toolsearch_pb2_grpc,
)
from codelab.v1 import common_pb2 as common
from services.common import tracing
from services.common.channels import internal_channel
from services.common.settings import Settings
from services.common.spare import DELAY, MAX_AGE, SpareCall
from services.common.tls import MeshTls

StreamCall: TypeAlias = aio.StreamStreamCall[common.ClientMessage, common.ServerEvent]


class SessionStream:
    """One attached Stream: send the IDE's messages, iterate the session's events."""

    def __init__(
        self,
        call: StreamCall,
        assign_ids: bool = True,
    ):
        self._call = call
        self.assign_ids = assign_ids
        self._ready: collections.deque[common.ServerEvent] = collections.deque()
        self._send_lock = asyncio.Lock()
        self.closed = False
        """Closed by this side (a read failing with CANCELLED then is no news)."""

    def prepare(self, message: common.ClientMessage) -> None:
        """What ``send`` sets on a message before writing it (its id, the trace)."""
        kind = message.WhichOneof("message")
        if self.assign_ids and kind in ONCE and not message.HasField("client_message_id"):
            message.client_message_id = new_client_id()
        if tracing.enabled() and not message.trace_context and not message.HasField("attach"):
            tracing.inject(message.trace_context)

    async def send(self, message: common.ClientMessage) -> None:
        """Write one message; a stream that already ended raises its ``AioRpcError``
        (grpc raises ``InvalidStateError`` there, which says nothing of why). A message the
        runtime applies once gets a fresh ``client_message_id`` when it has none (set on
        ``message`` itself, so resending the same object is safe); with tracing on it
        carries the current trace context (the Stream's own metadata names only the
        connection's)."""
        self.prepare(message)
        async with self._send_lock:
            try:
                await self._call.write(message)
            except (asyncio.InvalidStateError, aio.UsageError):
                raise await self.failure() from None

    async def failure(self) -> aio.AioRpcError:
        """How the call ended, as the error a failed read would raise."""
        self._call.cancel()  # no-op on a finished call; never wait on a live one
        return aio.AioRpcError(
            await self._call.code(),
            await self._call.initial_metadata() or aio.Metadata(),
            await self._call.trailing_metadata() or aio.Metadata(),
            await self._call.details(),
        )

    async def _fill(self) -> bool:
        """Read the next message into ``_ready``: the event, then its ``then``; False when
        the stream ended."""
        event = await self._call.read()
        if event is aio.EOF:
            return False
        assert isinstance(event, common.ServerEvent)
        self._ready.append(event)
        if event.then:  # most messages carry none: no copy, no clear on the token path
            self._ready.extend(event.then)
            event.ClearField("then")
        return True

    async def batches(self) -> AsyncIterator[list[common.ServerEvent]]:
        """The events as the runtime sent them: each message with its ``then``, in order
        (for a forwarder that writes a batch at once; a replay arrives in pages)."""
        while self._ready or await self._fill():
            batch = list(self._ready)
            self._ready.clear()
            yield batch

    async def __aiter__(self) -> AsyncIterator[common.ServerEvent]:
        """Every event, one at a time (events the runtime sent together in ``then`` too).

        Events of a batch not yet handed out wait on the stream, not in the iterator: a
        loop that stops early (``until_done``) loses none of them to the next one."""
        while self._ready or await self._fill():
            yield self._ready.popleft()

    async def until_done(self) -> list[common.ServerEvent]:
        """Every event up to and including the next ``done``."""
        seen: list[common.ServerEvent] = []
        async for event in self:
            seen.append(event)
            if event.WhichOneof("event") == "done":
                break
        return seen

    def close(self) -> None:
        self.closed = True
        self._call.cancel()

    async def __aenter__(self) -> SessionStream:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class MeshClient:
    """Channels and stubs for every mesh service."""

    def __init__(
        self,
        *,
        internal_api_key: str,
        orchestrator_addr: str,
        toolsearch_addr: str = "",
        hitl_addr: str = "",
        llmproxy_addr: str = "",
        tls: MeshTls | None = None,
    ) -> None:
        self.addresses = {
            "orchestrator": orchestrator_addr,
            "toolsearch": toolsearch_addr,
            "hitl": hitl_addr,
            "llmproxy": llmproxy_addr,
        }
        self._channels = {
            name: internal_channel(addr, internal_api_key, tls)
            for name, addr in self.addresses.items()
            if addr
        }
        self.assign_ids = True
        """Streams give every once-only message a client_message_id (off in the gateway,
        which passes the IDE's own through)."""
        self.runtime = cast(
            "runtime_pb2_grpc.AgentRuntimeAsyncStub",
            runtime_pb2_grpc.AgentRuntimeStub(self._channels["orchestrator"]),
        )
        self._spare: SpareCall[StreamCall] | None = None

    def keep_spare_stream(self, max_age: float = MAX_AGE, delay: float = DELAY) -> None:
        """Keep a Stream call opened ahead for the next ``open_stream``
        (services/common/spare.py): for a client that opens streams often. Not with tracing
        on: a stream's call then opens in its own request's context."""
        if not tracing.enabled():
            self._spare = SpareCall(self.runtime.Stream, max_age, delay)

    @property
    def admin(self) -> admin_pb2_grpc.AgentAdminAsyncStub:
        """Templates, instances and agent search (served by the orchestrator)."""
        return cast(
            "admin_pb2_grpc.AgentAdminAsyncStub",
            admin_pb2_grpc.AgentAdminStub(self._channel("orchestrator")),
        )

    @property
    def access(self) -> access_pb2_grpc.AccessAsyncStub:
        """Per-key limits and API keys (served by the orchestrator)."""
        return cast(
            "access_pb2_grpc.AccessAsyncStub",
            access_pb2_grpc.AccessStub(self._channel("orchestrator")),
        )

    @property
    def sources(self) -> sources_pb2_grpc.ToolSourcesAsyncStub:
        """MCP tool sources (served by the orchestrator, which holds the connections)."""
        return cast(
            "sources_pb2_grpc.ToolSourcesAsyncStub",
            sources_pb2_grpc.ToolSourcesStub(self._channel("orchestrator")),
        )

    @property
    def toolsearch(self) -> toolsearch_pb2_grpc.ToolSearchAsyncStub:
        return cast(
            "toolsearch_pb2_grpc.ToolSearchAsyncStub",
            toolsearch_pb2_grpc.ToolSearchStub(self._channel("toolsearch")),
        )

    @property
    def hitl(self) -> hitl_pb2_grpc.HitlAsyncStub:
        return cast("hitl_pb2_grpc.HitlAsyncStub", hitl_pb2_grpc.HitlStub(self._channel("hitl")))

    @property
    def llmproxy(self) -> llmproxy_pb2_grpc.LlmProxyAsyncStub:
        return cast(
            "llmproxy_pb2_grpc.LlmProxyAsyncStub",
            llmproxy_pb2_grpc.LlmProxyStub(self._channel("llmproxy")),
        )

    def _channel(self, name: str) -> aio.Channel:
        channel = self._channels.get(name)
        if channel is None:
            raise ValueError(f"no address for {name}")
        return channel

    @classmethod
    def from_settings(cls, settings: Settings) -> MeshClient:
        return cls(
            internal_api_key=settings.require_internal_key(),
            orchestrator_addr=settings.orchestrator_addr,
            toolsearch_addr=settings.toolsearch_addr,
            hitl_addr=settings.hitl_addr,
            llmproxy_addr=settings.llmproxy_addr,
            tls=MeshTls.from_settings(settings),
        )

    async def open_stream(
        self,
        session_id: str,
        *,
        last_seq: int = -1,
        user_id: str = "",
        title: str = "",
        system_prompt: str = "",
        first: common.ClientMessage | None = None,
    ) -> SessionStream:
        """Attach to ``session_id``; ``last_seq`` >= 0 replays the events after it. A
        session that does not exist yet is created with ``title`` and ``system_prompt``.
        ``first``: the stream's first message, sent with the attach (a new session's first
        turn starts its model request while the attach runs)."""
        attach = common.ClientMessage(
            attach=common.Attach(
                session_id=session_id,
                last_seq=last_seq,
                user_id=user_id,
                title=title,
                system_prompt=system_prompt,
            )
        )
        call = self._spare.take() if self._spare is not None else self.runtime.Stream()
        stream = SessionStream(call, self.assign_ids)
        if first is not None:
            stream.prepare(first)
            attach.attach.first.CopyFrom(first)
        await stream.send(attach)
        return stream

    async def health(self) -> dict[str, str]:
        """Each service's overall health status name (UNREACHABLE when it does not answer)."""

        async def check(name: str, channel: aio.Channel) -> tuple[str, str]:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2.0)
            except grpc.aio.AioRpcError:
                return name, "UNREACHABLE"
            return name, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

        results = await asyncio.gather(*(check(n, c) for n, c in self._channels.items()))
        return dict(results)

    async def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
        for channel in self._channels.values():
            await channel.close()
