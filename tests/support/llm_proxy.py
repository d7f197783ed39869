"""A real llmproxy gRPC server on a free port that plays scripted replies (chunks, then
maybe a failure) through the mesh's own server factory, so failures reach the client with
the status and ``x-error-code`` a real llmproxy gives them; and an LlmClient on it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
from grpc import aio

from codelab.v1 import llmproxy_pb2 as pb
from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common.channels import internal_channel
from services.common.errors import ServiceError
from services.common.server import ServiceDeps, create_server
from services.common.settings import Settings
from services.llmproxy.pacing import TextBudget
from services.llmproxy.servicer import LlmProxyServicer
from services.orchestrator.peers.llm import LlmClient
from tests.support.mesh import INTERNAL_KEY


class Unscripted(ServiceError):
    """A call the scripted proxy does not play."""


SERVICE = pb.DESCRIPTOR.services_by_name["LlmProxy"].full_name


def text(piece: str) -> pb.CompleteChunk:
    return pb.CompleteChunk(text_delta=piece)


def finish(reason: str = "stop", prompt: int = 7, completion: int = 3) -> pb.CompleteChunk:
    usage = pb.Usage(prompt_tokens=prompt, completion_tokens=completion)
    return pb.CompleteChunk(finish=pb.Finish(finish_reason=reason, usage=usage, model="m-1"))


@dataclass
class Reply:
    """One Complete call's answer: ``chunks``, then ``error`` raised (a ServiceError goes
    out with its code) or ``status`` aborted with no code (llmproxy itself failing)."""

    chunks: Sequence[pb.CompleteChunk] = (text("ok"), finish())
    error: ServiceError | None = None
    status: grpc.StatusCode | None = None
    hold: float = 0.0
    """Seconds to wait after the chunks (a slow or stalled upstream)."""


@dataclass
class ScriptedProxy(pb_grpc.LlmProxyServicer):
    """Plays ``replies`` in order (then the default reply) and records every request."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[pb.CompleteRequest] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    shared: list[pb.CompleteRequest] = field(default_factory=list)
    """The requests that came on shared calls (CompleteMany), in order."""
    shared_calls: int = 0
    """CompleteMany calls opened so far."""
    shared_ended: int = 0
    """CompleteMany calls that ended by their client's end of writing (not cancelled)."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """CompleteMany's: set, idle shared calls end (the server's grace period)."""
    refuse_shared: int = 0
    """Shared calls to end UNAVAILABLE once a request is read (a call whose llmproxy went
    away while it was kept)."""
    budget: TextBudget = field(default_factory=lambda: TextBudget(0))
    """CompleteMany's text pieces per second (llmproxy/pacing.py): none, every piece at once."""

    def play(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def Complete(
        self, request: pb.CompleteRequest, context: Any
    ) -> AsyncIterator[pb.CompleteChunk]:
        self.requests.append(request)
        reply = self.replies.pop(0) if self.replies else Reply()
        try:
            for chunk in reply.chunks:
                yield chunk
            if reply.hold:
                await asyncio.sleep(reply.hold)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if reply.error is not None:
            raise reply.error
        if reply.status is not None:
            await context.abort(reply.status, "llmproxy failed")

    def answer(self, request: pb.CompleteRequest, context: Any) -> AsyncIterator[pb.CompleteChunk]:
        """What CompleteMany runs for one request: this proxy's Complete."""
        return self.Complete(request, context)

    async def CompleteMany(
        self, request_iterator: AsyncIterator[pb.CompleteEnvelope], context: Any
    ) -> AsyncIterator[pb.CompleteBatch]:
        """llmproxy's own CompleteMany over this proxy's Complete, noting its requests."""
        self.shared_calls += 1

        async def noted() -> AsyncIterator[pb.CompleteEnvelope]:
            async for envelope in request_iterator:
                if envelope.HasField("request"):
                    self.shared.append(envelope.request)
                    if self.refuse_shared:
                        self.refuse_shared -= 1
                        await context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost")
                yield envelope

        async for batch in LlmProxyServicer.CompleteMany(self, noted(), context):  # type: ignore[arg-type]
            yield batch
        self.shared_ended += 1

    async def Embed(self, request: pb.EmbedRequest, context: Any) -> pb.EmbedResponse:
        raise Unscripted("Embed")

    async def GetUsage(self, request: pb.GetUsageRequest, context: Any) -> pb.SessionUsage:
        raise Unscripted("GetUsage")

    async def ListUsage(self, request: pb.ListUsageRequest, context: Any) -> pb.ListUsageResponse:
        raise Unscripted("ListUsage")


@contextlib.asynccontextmanager
async def scripted_llm(
    deadline: float = 10.0, turn_retries: int = 3, *, shared: bool = False
) -> AsyncIterator[tuple[ScriptedProxy, LlmClient]]:
    """A running scripted llmproxy and an LlmClient that talks to it (over a shared
    CompleteMany call when ``shared``)."""
    async with scripted_replicas(1, deadline, turn_retries, shared=int(shared)) as running:
        proxies, client = running
        yield proxies[0], client


@contextlib.asynccontextmanager
async def scripted_replicas(
    replicas: int, deadline: float = 10.0, turn_retries: int = 3, *, shared: int = 0
) -> AsyncIterator[tuple[list[ScriptedProxy], LlmClient]]:
    """``replicas`` scripted llmproxies behind one channel (round robin, as the mesh's
    channels balance a list of addresses) and an LlmClient on ``shared`` shared calls."""
    proxies: list[ScriptedProxy] = []
    servers = []
    ports = []
    for _ in range(replicas):
        proxy = ScriptedProxy()
        deps = ServiceDeps(
            name="llmproxy",
            full_names=(SERVICE,),
            register=functools.partial(pb_grpc.add_LlmProxyServicer_to_server, proxy),
        )
        server, port = create_server(Settings(internal_api_key=INTERNAL_KEY), deps)
        await server.start()
        proxies.append(proxy)
        servers.append(server)
        ports.append(port)
    addresses = ",".join(f"127.0.0.1:{port}" for port in ports)
    channel: aio.Channel = internal_channel(addresses, INTERNAL_KEY)
    if replicas > 1:  # round robin picks among connected replicas: let every one connect
        await channel.channel_ready()
        await asyncio.sleep(0.2)
    stub = cast("pb_grpc.LlmProxyAsyncStub", pb_grpc.LlmProxyStub(channel))
    client = LlmClient(stub, deadline, turn_retries, shared=shared)
    try:
        yield proxies, client
    finally:
        await client.close()
        await channel.close()
        for server in servers:
            await server.stop(0)
