"""The orchestrator's side of llmproxy: completions as plain Python values.

This module is the transport edge towards llmproxy (it imports grpc so that the
agent loop does not); gRPC failures become ``LlmFailure`` with the spec's code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc

from codelab.v1 import llmproxy_pb2 as pb
from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common.channels import error_code
from services.common.errors import ErrorKind, ServiceError
from services.orchestrator import spans
from services.orchestrator.store import StoredMessage
from services.orchestrator.toolbox import ToolSpec

RESTART_ATTEMPTS = 6
_CODE_BY_STATUS = {
    grpc.StatusCode.UNAVAILABLE: "LLM_PROXY_UNAVAILABLE",
    grpc.StatusCode.DEADLINE_EXCEEDED: "LLM_TIMEOUT",
    grpc.StatusCode.ABORTED: "LLM_STREAM_INTERRUPTED",
}


class LlmFailure(ServiceError):
    """The model could not answer; ``code`` says why (LLM_TIMEOUT, LLM_ERROR, ...)."""

    code = "LLM_ERROR"
    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class TextPiece:
    """Streamed answer text."""

    text: str


@dataclass(frozen=True)
class ReasoningPiece:
    """Streamed reasoning of the model (shown to the user, kept for the trace)."""

    text: str


@dataclass(frozen=True)
class ModelToolCall:
    """A whole tool call proposed by the model (arguments exactly as produced)."""

    id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class ModelFinished:
    """End of the model's reply."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str = ""


ModelOutput = TextPiece | ReasoningPiece | ModelToolCall | ModelFinished


def to_proto(message: StoredMessage, with_reasoning: bool = False) -> pb.ChatMessage:
    """``message`` for the model; its reasoning only when ``with_reasoning``."""
    out = pb.ChatMessage(role=message.role, content=message.content)
    if message.name and message.role != "assistant":
        out.name = message.name
    for call in message.tool_calls or ():
        out.tool_calls.append(
            pb.LlmToolCall(id=call["id"], name=call["name"], arguments_json=call["arguments"])
        )
    if message.tool_call_id:
        out.tool_call_id = message.tool_call_id
    if with_reasoning and message.reasoning:
        out.reasoning = message.reasoning
    return out


class LlmClient:
    """Streams completions through llmproxy."""

    def __init__(self, stub: pb_grpc.LlmProxyAsyncStub, deadline: float) -> None:
        self.stub = stub
        self.deadline = deadline

    @spans.model_call
    async def complete(
        self,
        session_id: str,
        messages: Sequence[StoredMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        purpose: str = "turn",
        temperature: float | None = None,
        max_tokens: int | None = None,
        model: str = "",
        with_reasoning: bool = False,
        upstream_seconds: float | None = None,
    ) -> AsyncIterator[ModelOutput]:
        request = pb.CompleteRequest(
            session_id=session_id,
            purpose=purpose,
            model=model,
            messages=[to_proto(m, with_reasoning) for m in messages],
            tools=[
                pb.ToolDefinition(
                    name=t.name, description=t.description, parameters_json=t.parameters_json
                )
                for t in tools
            ],
        )
        if temperature is not None:
            request.temperature = temperature
        if max_tokens is not None:
            request.max_tokens = max_tokens
        if upstream_seconds is not None:  # the template's timeouts.llm_seconds
            request.timeout_seconds = upstream_seconds
        started = False
        for attempt in range(RESTART_ATTEMPTS):
            call = self.stub.Complete(request, timeout=self.deadline)
            try:
                async for chunk in call:
                    started = True
                    yield self._output(chunk)
                return
            except grpc.aio.AioRpcError as error:
                # No error code: the transport failed (llmproxy itself is restarting), not
                # the upstream model, whose retries llmproxy already spent.
                restarting = (
                    error.code() == grpc.StatusCode.UNAVAILABLE
                    and error_code(error) is None
                    and not started
                )
                if restarting and attempt < RESTART_ATTEMPTS - 1:
                    # llmproxy is restarting (the supervisor brings it back within seconds).
                    await asyncio.sleep(min(0.2 * 2**attempt, 2.0))
                    continue
                code = error_code(error) or _CODE_BY_STATUS.get(error.code(), "LLM_ERROR")
                if started and code == "LLM_PROXY_UNAVAILABLE":
                    code = "LLM_STREAM_INTERRUPTED"
                raise LlmFailure(error.details() or str(error.code()), code=code) from error
            finally:
                call.cancel()

    @staticmethod
    def _output(chunk: pb.CompleteChunk) -> ModelOutput:
        which = chunk.WhichOneof("chunk")
        if which == "text_delta":
            return TextPiece(chunk.text_delta)
        if which == "reasoning_delta":
            return ReasoningPiece(chunk.reasoning_delta)
        if which == "tool_call":
            tc = chunk.tool_call
            return ModelToolCall(tc.id, tc.name, tc.arguments_json)
        f = chunk.finish
        return ModelFinished(
            f.finish_reason, f.usage.prompt_tokens, f.usage.completion_tokens, f.model
        )
