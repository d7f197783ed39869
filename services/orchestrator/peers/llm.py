"""The orchestrator's side of llmproxy: completions as plain Python values.

This module is the transport edge towards llmproxy (it imports grpc so that the
agent loop does not); gRPC failures become ``LlmFailure`` with the spec's code.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

import grpc
from grpc import aio

from codelab.v1 import llmproxy_pb2 as pb
from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common.channels import error_code
from services.common.model_stream import (
    ModelFinished,
    ModelOutput,
    ModelToolCall,
    ReasoningPiece,
    TextPiece,
)
from services.orchestrator import spans
from services.orchestrator.errors import LlmFailure
from services.orchestrator.peers.early import EARLY, EarlyCall, Guesses, Room
from services.orchestrator.peers.shared_calls import SharedCalls, SharedRequest
from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.toolbox import ToolSpec

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

log = logging.getLogger(__name__)

ModelCallStream: TypeAlias = (
    SharedRequest | aio.UnaryStreamCall[pb.CompleteRequest, pb.CompleteChunk]
)

RESTART_ATTEMPTS = 6
"""Calls while llmproxy itself restarts (the transport fails, no error code)."""
TURN_BACKOFF, TURN_BACKOFF_MAX = 0.5, 4.0
_CODE_BY_STATUS = {
    grpc.StatusCode.UNAVAILABLE: "LLM_PROXY_UNAVAILABLE",
    grpc.StatusCode.DEADLINE_EXCEEDED: "LLM_TIMEOUT",
    grpc.StatusCode.ABORTED: "LLM_STREAM_INTERRUPTED",
}
_TRANSPORT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
    }
)
RETRIED_CODES = frozenset({"LLM_PROXY_UNAVAILABLE", "LLM_STREAM_INTERRUPTED"})
"""Before the first token, nothing was shown: an unreachable or overloaded upstream, or a
stream cut before it said anything, is worth another call. A timeout or a refusal is not."""


def retry_delay(
    status: grpc.StatusCode, code: str | None, attempt: int, retries: int
) -> float | None:
    """Seconds before another try of a call that failed before its first token
    (``attempt`` counts from 0), or None when it is not to be retried."""
    if code is None and status in _TRANSPORT and attempt < RESTART_ATTEMPTS - 1:
        return float(min(0.2 * 2**attempt, 2.0))  # llmproxy restarting: back within seconds
    if code in RETRIED_CODES and attempt < retries:
        return float(min(TURN_BACKOFF * 2**attempt, TURN_BACKOFF_MAX))
    return None


def to_proto(message: StoredMessage, with_reasoning: bool = False) -> pb.ChatMessage:
    """``message`` for the model; its reasoning only when ``with_reasoning``."""
    out = pb.ChatMessage(role=message.role, content=message.content)
    _fill(out, message, with_reasoning)
    return out


def add_messages(
    into: RepeatedCompositeFieldContainer[pb.ChatMessage],
    messages: Sequence[StoredMessage],
    with_reasoning: bool = False,
) -> None:
    """``messages`` as ``to_proto`` makes them, built in the request's own list: a list of
    messages handed to the request's constructor is copied into it, which for a
    1,000-message history cost more than building them (4.4 ms against 1.8 on the 2-core
    AMD box)."""
    add = into.add
    for message in messages:
        _fill(add(role=message.role, content=message.content), message, with_reasoning)


def _fill(out: pb.ChatMessage, message: StoredMessage, with_reasoning: bool) -> None:
    if message.name and message.role != "assistant":
        out.name = message.name
    for call in message.tool_calls or ():
        out.tool_calls.add(id=call["id"], name=call["name"], arguments_json=call["arguments"])
    if message.tool_call_id:
        out.tool_call_id = message.tool_call_id
    if with_reasoning and message.reasoning:
        out.reasoning = message.reasoning


def output_from_proto(chunk: pb.CompleteChunk) -> ModelOutput:
    """One piece of the reply as llmproxy sent it (``output_to_proto`` there)."""
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
        f.finish_reason,
        f.usage.prompt_tokens,
        f.usage.completion_tokens,
        f.model,
        f.usage.reasoning_tokens,
    )


class Meter(Protocol):
    """Per-key budgets around model calls (see session/limits.py)."""

    async def admit_model_call(self, session_id: str, user_id: str | None = None) -> None:
        """Raise when the day's budget of the session's key (``user_id``'s when given) is
        spent."""
        ...

    async def record(
        self, session_id: str, model: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Count a finished call."""
        ...


class LlmClient:
    """Streams completions through llmproxy; with a ``meter``, each call is admitted
    first (refused once the key's day budget is spent) and counted when it finishes.
    With ``shared`` > 0, requests go on that many CompleteMany calls kept open
    (shared_calls.py) instead of a Complete call each. With ``early``, a turn's request
    can leave before the turn asks for it (``send_early``, early.py)."""

    def __init__(
        self,
        stub: pb_grpc.LlmProxyAsyncStub,
        deadline: float,
        turn_retries: int = 3,
        meter: Meter | None = None,
        *,
        shared: int = 0,
        early: bool = False,
    ) -> None:
        self.stub = stub
        self.deadline = deadline
        self.turn_retries = turn_retries
        """Retries of a turn's model call that failed before its first token."""
        self.meter = meter
        self._shared: SharedCalls | None = None
        if shared:
            self._shared = SharedCalls(stub.CompleteMany, shared)
        self.early = early
        self.guesses = Guesses()
        self._early: dict[str, tuple[Hashable, EarlyCall, object]] = {}
        """Session -> (its guess's key, the request sent early, what it was sent for)."""

    def _open(self, request: pb.CompleteRequest) -> ModelCallStream:
        if self._shared is not None:
            return self._shared.request(request, self.deadline)
        return self.stub.Complete(request, timeout=self.deadline)

    async def _send_ahead(self, request: pb.CompleteRequest) -> ModelCallStream:
        """A call for ``request`` whose request is sent now, before it is read."""
        call = self._open(request)
        if isinstance(call, SharedRequest):
            await call.send()
        return call

    def send_early(
        self,
        session_id: str,
        agent: str,
        said: StoredMessage,
        fresh: str | None,
        user_id: str | None = None,
        owner: object = None,
    ) -> None:
        """Send the request session ``session_id``'s turn is likely to make for user message
        ``said`` with ``agent`` now (``fresh``: the session is new, with that prompt of its
        own); nothing when it cannot be told, or one waits for the session already.
        ``user_id``: the session may not exist yet, or not be this user's: only a new
        session's request is sent, on this user's budget. ``owner``: what the request is
        for (``drop_early`` with another owner leaves it)."""
        if not self.early or session_id in self._early:
            return
        new = user_id is not None
        user = to_proto(said)
        guessed = self.guesses.guess(session_id, agent, user, said.token_count, fresh, new=new)
        if guessed is None:
            return
        key, request = guessed
        admit = None
        if self.meter is not None:
            meter = self.meter
            admit = functools.partial(meter.admit_model_call, session_id, user_id)
        opened = EarlyCall(request, functools.partial(self._send_ahead, request), admit)
        self._early[session_id] = (key, opened, owner)

    def has_early(self, session_id: str) -> bool:
        """A request was sent early for the session's turn (and not taken yet)."""
        return session_id in self._early

    def drop_early(self, session_id: str, owner: object = None) -> None:
        """The session's turn is over: an early request it did not take is cancelled (with
        ``owner``, only the one sent for it: the next message's may have left meanwhile)."""
        found = self._early.get(session_id)
        if found is None or (owner is not None and found[2] is not owner):
            return
        del self._early[session_id]
        EARLY.labels("unused").inc()
        found[1].cancel()

    def _take_early(self, request: pb.CompleteRequest) -> EarlyCall | None:
        """The early request sent for ``request``'s session when it is ``request``."""
        found = self._early.pop(request.session_id, None)
        if found is None:
            return None
        key, early, _ = found
        hit = early.request == request
        self.guesses.judged(key, hit)
        EARLY.labels("taken" if hit else "replaced").inc()
        if hit:
            return early
        early.cancel()
        return None

    def answered(
        self,
        session_id: str,
        agent: str,
        prompt: str,
        answer: StoredMessage,
        reasoning: bool,
        room: Room,
    ) -> None:
        """The session's turn ended with ``answer`` (no tool call) from ``agent``; ``prompt``
        is the session's own system prompt, ``reasoning`` the template's rendering and
        ``room`` the prompt's distance from compaction."""
        if self.early:
            self.guesses.answered(session_id, agent, prompt, to_proto(answer, reasoning), room)

    async def close(self) -> None:
        """Cancel the early requests, close the shared calls; open no more."""
        self.early = False
        for session_id in list(self._early):
            self.drop_early(session_id)
        if self._shared is not None:
            self._shared.close()

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
        sent: Callable[[], None] | None = None,
    ) -> AsyncIterator[ModelOutput]:
        """The reply's pieces as they come; ``sent`` is called once the first request is
        on its way (work the request does not need can start then)."""
        request = pb.CompleteRequest(session_id=session_id, purpose=purpose, model=model)
        add_messages(request.messages, messages, with_reasoning)
        for t in tools:
            request.tools.add(
                name=t.name, description=t.description, parameters_json=t.parameters_json
            )
        if temperature is not None:
            request.temperature = temperature
        if max_tokens is not None:
            request.max_tokens = max_tokens
        if upstream_seconds is not None:  # the template's timeouts.llm_seconds
            request.timeout_seconds = upstream_seconds
        early = None
        if purpose == "turn" and self.early:
            early = self._take_early(request)
            self.guesses.sent(request)
        if self.meter is not None:
            try:
                await self.meter.admit_model_call(session_id)
            except BaseException:
                if early is not None:
                    early.cancel()
                raise
        ahead: ModelCallStream | None = await early.taken() if early is not None else None
        # Classification falls back to keywords at once: only turns are retried in full.
        retries = self.turn_retries if purpose != "classification" else 0
        started = False
        attempt = 0
        fresh = False  # the request went on a shared call opened for it
        while True:
            call: ModelCallStream
            if ahead is not None:
                call, ahead = ahead, None
            else:
                call = self._open(request)
            try:
                if sent is not None:
                    sent()
                    sent = None
                async for chunk in call:
                    started = True
                    output = output_from_proto(chunk)
                    if self.meter is not None and isinstance(output, ModelFinished):
                        await self.meter.record(
                            session_id,
                            output.model or model,
                            output.prompt_tokens,
                            output.completion_tokens,
                        )
                    yield output
                return
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as failure:
                ended = not isinstance(failure, grpc.aio.AioRpcError) or (
                    failure.code() in _TRANSPORT and not error_code(failure)
                )
                if self._shared is not None and not started and ended and not fresh:
                    # The shared call had ended (its llmproxy went away), not the request:
                    # ask again at once (a lost call is replaced by a new one).
                    fresh = True
                    continue
                if not isinstance(failure, grpc.aio.AioRpcError):
                    raise
                error = failure
                code = error_code(error)
                delay = None if started else retry_delay(error.code(), code, attempt, retries)
                if delay is not None:
                    log.warning(
                        "retrying a model call that failed before its first token",
                        extra={"fields": {"attempt": attempt + 1, "delay_s": delay, "code": code}},
                    )
                    attempt += 1
                    await asyncio.sleep(delay)
                    continue
                code = code or _CODE_BY_STATUS.get(error.code(), "LLM_ERROR")
                if started and code == "LLM_PROXY_UNAVAILABLE":
                    code = "LLM_STREAM_INTERRUPTED"
                raise LlmFailure(error.details() or str(error.code()), code=code) from error
            finally:
                call.cancel()
