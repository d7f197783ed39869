"""LlmProxy gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from codelab.v1 import llmproxy_pb2 as pb
from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common.errors import InvalidInput
from services.common.model_stream import ModelOutput, ModelToolCall, ReasoningPiece, TextPiece
from services.llmproxy.accounting import AccountedUpstream
from services.llmproxy.coalesce import coalesced
from services.llmproxy.many import serve_many
from services.llmproxy.pacing import TextBudget
from services.llmproxy.store import Usage, UsageStore
from services.llmproxy.tool_names import ToolNames
from services.llmproxy.upstream import CompletionRequest

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LlmProxy"].full_name
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000


def output_to_proto(chunk: ModelOutput, names: ToolNames) -> pb.CompleteChunk:
    """One piece of the reply on the wire (the orchestrator's LlmClient reads it back)."""
    if isinstance(chunk, TextPiece):
        return pb.CompleteChunk(text_delta=chunk.text)
    if isinstance(chunk, ReasoningPiece):
        return pb.CompleteChunk(reasoning_delta=chunk.text)
    if isinstance(chunk, ModelToolCall):
        call = pb.LlmToolCall(
            id=chunk.id, name=names.to_catalog(chunk.name), arguments_json=chunk.arguments_json
        )
        return pb.CompleteChunk(tool_call=call)
    usage = pb.Usage(
        prompt_tokens=chunk.prompt_tokens,
        completion_tokens=chunk.completion_tokens,
        total_tokens=chunk.prompt_tokens + chunk.completion_tokens,
        reasoning_tokens=chunk.reasoning_tokens,
    )
    return pb.CompleteChunk(
        finish=pb.Finish(finish_reason=chunk.finish_reason, model=chunk.model, usage=usage)
    )


def message_to_openai(message: pb.ChatMessage, names: ToolNames) -> dict[str, Any]:
    """A ChatMessage in the OpenAI wire shape: tool names, and every message's ``name``
    (a tool result carries its tool's), as the upstream accepts them."""
    out: dict[str, Any] = {"role": message.role}
    out["content"] = message.content if message.HasField("content") else None
    if message.HasField("name"):  # a tool result's name is its call's: the same wire form
        out["name"] = names.to_wire(message.name)
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": names.to_wire(call.name), "arguments": call.arguments_json},
            }
            for call in message.tool_calls
        ]
    if message.HasField("tool_call_id"):
        out["tool_call_id"] = message.tool_call_id
    if message.HasField("reasoning"):
        out["reasoning_content"] = message.reasoning
    return out


def tool_to_openai(tool: pb.ToolDefinition, names: ToolNames) -> dict[str, Any]:
    return _openai_tool(
        tool.name, names.to_wire(tool.name), tool.description, tool.parameters_json or "{}"
    )


@functools.lru_cache(maxsize=4096)
def _openai_tool(name: str, wire: str, description: str, parameters: str) -> dict[str, Any]:
    """A tool in OpenAI's shape, its parameters parsed, built once per distinct tool (every
    model call of an agent offers the same few dozen); the value is shared and never
    modified (the body is only serialized)."""
    try:
        schema = json.loads(parameters)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"tool {name}: parameters_json is not JSON: {error}") from error
    return {
        "type": "function",
        "function": {"name": wire, "description": description, "parameters": schema},
    }


def request_names(request: pb.CompleteRequest) -> ToolNames:
    """Every tool name the request carries: offered tools, the history's calls and the
    names of their results."""
    names = {t.name for t in request.tools}
    for message in request.messages:  # a long history: one look at most messages
        calls = message.tool_calls
        if calls:
            names.update([call.name for call in calls])
        if message.role == "tool" and message.HasField("name"):
            names.add(message.name)
    return _names_of(frozenset(names))


@functools.lru_cache(maxsize=1024)
def _names_of(names: frozenset[str]) -> ToolNames:
    """The map of a set of names, built once per distinct set (it is a function of the
    set alone, and never modified)."""
    return ToolNames(names)


def request_from_proto(request: pb.CompleteRequest, names: ToolNames) -> CompletionRequest:
    if not request.messages:
        raise InvalidInput("messages must not be empty")
    return CompletionRequest(
        messages=[message_to_openai(m, names) for m in request.messages],
        tools=[tool_to_openai(t, names) for t in request.tools],
        model=request.model,
        temperature=request.temperature if request.HasField("temperature") else None,
        max_tokens=request.max_tokens if request.HasField("max_tokens") else None,
        timeout=request.timeout_seconds,
    )


def list_limit(limit: int) -> int:
    """0 means the default; larger requests are capped rather than refused."""
    if limit < 0:
        raise InvalidInput(f"limit must not be negative, got {limit}")
    return min(limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)


def usage_to_proto(usage: Usage) -> pb.SessionUsage:
    return pb.SessionUsage(
        session_id=usage.session_id,
        total_requests=usage.total_requests,
        successful_requests=usage.successful_requests,
        failed_requests=usage.failed_requests,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        average_duration_ms=usage.average_duration_ms,
        requests_with_tools=usage.requests_with_tools,
        reasoning_tokens=usage.reasoning_tokens,
    )


class LlmProxyServicer(pb_grpc.LlmProxyServicer):
    """Streams completions and answers usage and embedding queries."""

    def __init__(
        self,
        upstream: AccountedUpstream,
        store: UsageStore,
        embed_model: str,
        budget: TextBudget | None = None,
    ) -> None:
        self.upstream = upstream
        self.store = store
        self.embed_model = embed_model
        self.budget = budget or TextBudget(0)
        """The text pieces per second the shared calls' streams share (pacing.py; the
        server passes LLM_STREAM_PIECES_PER_S, none is no limit)."""
        self.stopping = asyncio.Event()
        """Set as the server's grace period starts: idle shared calls end."""

    async def Complete(
        self, request: pb.CompleteRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.CompleteChunk]:
        async for chunk in self.answer(request, context, join=True):
            yield chunk

    async def answer(
        self, request: pb.CompleteRequest, context: Any, *, join: bool = False
    ) -> AsyncIterator[pb.CompleteChunk]:
        """``request``'s chunks as the upstream gives them; ``join``: text that waits for
        its reader is joined (coalesce.py). CompleteMany does not join here: its batches
        join what waits for the next one (many.py)."""
        names = request_names(request)
        domain = request_from_proto(request, names)
        upstream = self.upstream.complete(request.session_id, request.purpose, domain)
        async for chunk in coalesced(upstream) if join else upstream:
            yield output_to_proto(chunk, names)

    async def CompleteMany(
        self,
        request_iterator: AsyncIterator[pb.CompleteEnvelope],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.CompleteBatch]:
        """Many ``Complete`` requests on one call (many.py)."""
        async for batch in serve_many(request_iterator, self.answer, self.stopping, self.budget):
            yield batch

    async def Embed(
        self, request: pb.EmbedRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EmbedResponse:
        if not request.inputs:
            raise InvalidInput("inputs must not be empty")
        model = request.model or self.embed_model
        vectors = await self.upstream.upstream.embed(list(request.inputs), model)
        return pb.EmbedResponse(model=model, embeddings=[pb.Embedding(values=v) for v in vectors])

    async def GetUsage(
        self, request: pb.GetUsageRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SessionUsage:
        return usage_to_proto(await self.store.usage(request.session_id))

    async def ListUsage(
        self, request: pb.ListUsageRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListUsageResponse:
        rows = await self.store.list_usage(list_limit(request.limit))
        return pb.ListUsageResponse(sessions=[usage_to_proto(u) for u in rows])
