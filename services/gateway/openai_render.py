"""The runtime's events in OpenAI chat-completion terms: errors, folding, objects, chunks.

The runtime -> client half of openai_api.py. Field names and nesting follow the public
chat-completions API (the shapes of the scripted model's ``chunks.py``), so the official
SDK parses them unchanged.
CodeLab additions are extra fields the SDK keeps in ``model_extra``: ``session_id`` on
every completion and chunk, ``codelab_approval`` on a tool call that waits for a human
decision, ``codelab_events`` (non-streaming only) for events OpenAI has no place for.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from clients.python import SessionStream
from codelab.v1 import common_pb2 as pb
from services.gateway.errors import GatewayError, OpenAIError, ProtocolError
from services.gateway.event_json import dumps
from services.gateway.held_streams import StreamReader
from services.gateway.mesh import describe
from services.gateway.translate import event_to_json

JsonObject = dict[str, Any]
DONE_FRAME = "data: [DONE]\n\n"
CHUNK = "chat.completion.chunk"
# A leg that ends in one of these waits for the client to answer its tool calls.
AWAITING = frozenset({"awaiting_tool_result", "awaiting_approval"})
DECISIONS = ("approve", "edit", "reject")


def error_from_event(error: pb.ErrorEvent) -> OpenAIError:
    code = pb.ErrorCode.Name(error.error_code)
    return OpenAIError.of_code(code, error.content or code)


def error_from_rpc(error: grpc.aio.AioRpcError) -> OpenAIError:
    status, code, message = describe(error)
    return OpenAIError(status, message, code)


# What can go wrong before the answer starts; ``failure`` renders each.
FAILURES = (GatewayError, grpc.aio.AioRpcError)


def failure(error: Exception) -> OpenAIError:
    """Any failure before the answer starts, as an OpenAI error."""
    if isinstance(error, OpenAIError):
        return error
    if isinstance(error, ProtocolError):
        return OpenAIError(error.status, error.message, error.code, "messages")
    if isinstance(error, GatewayError):
        return OpenAIError(error.status, error.message, error.code)
    if isinstance(error, grpc.aio.AioRpcError):
        return error_from_rpc(error)
    raise error


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class ToolCallOut:
    """A runtime tool_call as an OpenAI function call; ``approval`` when a human must decide."""

    id: str
    name: str
    arguments: str
    approval: JsonObject | None = None

    @classmethod
    def from_event(cls, call: pb.ToolCall) -> ToolCallOut:
        approval = None
        if call.requires_approval:
            approval = {"reason": call.reason, "decisions": list(DECISIONS)}
        return cls(call.call_id, call.tool_name, call.arguments_json or "{}", approval)

    def part(self, arguments: str) -> JsonObject:
        """The call as OpenAI lists it; streaming sends it with empty arguments first."""
        function = {"name": self.name, "arguments": arguments}
        out: JsonObject = {"id": self.id, "type": "function", "function": function}
        if self.approval is not None:
            out["codelab_approval"] = self.approval
        return out


Output = str | ToolCallOut | OpenAIError


@dataclass
class LegFolder:
    """Folds the events of one leg (one input up to its ``done``) into OpenAI outputs.

    Text goes out as it comes. Tool calls are held until ``done``: only a leg that ends
    waiting for them (and is the request's last) reports them — a later input of the
    same request would cancel them. An error is fatal when the leg ends in ``error`` or
    produced nothing else (an edit refused while the approval stays pending); other
    errors, like a refused path the model then corrects, are only ``extras``.
    """

    release_calls: bool
    extras: list[JsonObject] = field(default_factory=list)
    calls: list[ToolCallOut] = field(default_factory=list)
    error: pb.ErrorEvent | None = None
    spoke: bool = False
    finished: bool = False

    def feed(self, event: pb.ServerEvent) -> list[Output]:
        kind = event.WhichOneof("event")
        if kind == "assistant_message":
            message = event.assistant_message
            text = message.token or message.content
            self.spoke = self.spoke or bool(text)
            return [text] if text else []
        if kind == "tool_call":
            self.calls.append(ToolCallOut.from_event(event.tool_call))
            return []
        if kind != "done":
            if kind == "error":
                self.error = event.error
            self.extras.append(event_to_json(event))
            return []
        self.finished = True
        status = event.done.status
        released = self.calls if self.release_calls and status in AWAITING else []
        if self.error is not None and (status == "error" or not (self.spoke or released)):
            return [error_from_event(self.error)]
        if status == "error":
            return [OpenAIError.of_code("INTERNAL_ERROR", "the turn failed without an error event")]
        return list(released)


Reopen = Callable[[int], Awaitable[SessionStream]]


async def run_legs(
    reader: StreamReader,
    inputs: list[pb.ClientMessage],
    extras: list[JsonObject],
    idle_timeout: float,
    reopen: Reopen,
) -> AsyncIterator[Output]:
    """Fold each input's events up to its ``done``; stop at a fatal error. The caller
    sent the first input before the response started (its first token does not wait for
    the response's headers); each later one is sent here when its turn comes.

    A repeated ``Idempotency-Key`` is answered ``done`` status ``duplicate`` naming the
    seq where the first request's events start: ``reopen`` replays them from there.
    """
    events = reader.events()  # one iterator: a message may carry several events
    try:
        for position, message in enumerate(inputs):
            folder = LegFolder(release_calls=position == len(inputs) - 1, extras=extras)
            try:
                if position:
                    await reader.stream.send(message)
            except grpc.aio.AioRpcError as error:  # the stream ended between two inputs
                yield error_from_rpc(error)
                return
            async for out in fold_leg(events, folder, idle_timeout):
                if isinstance(out, Duplicate):
                    replay = await reopen(out.first_seq - 1)
                    try:
                        folder = LegFolder(release_calls=folder.release_calls, extras=extras)
                        async for again in fold_leg(aiter(replay), folder, idle_timeout):
                            if not isinstance(again, Duplicate):
                                yield again
                    finally:
                        replay.close()
                    break
                yield out
                if isinstance(out, OpenAIError):
                    return
    finally:
        await events.aclose()  # nothing reads the stream for this request any more


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The leg's input was a repeat; the first one's events start at ``first_seq``."""

    first_seq: int


async def fold_leg(
    events: AsyncIterator[pb.ServerEvent], folder: LegFolder, idle_timeout: float
) -> AsyncIterator[Output | Duplicate]:
    """The outputs of one leg, read from ``events`` until the folder has its ``done``."""
    while not folder.finished:
        try:
            async with asyncio.timeout(idle_timeout):
                event = await anext(events)
        except StopAsyncIteration:
            yield OpenAIError.of_code("SERVICE_UNAVAILABLE", "the runtime closed the stream")
            return
        except TimeoutError:
            yield OpenAIError.of_code("LLM_TIMEOUT", "no event within the stream timeout")
            return
        except grpc.aio.AioRpcError as error:
            yield error_from_rpc(error)
            return
        if event.HasField("done") and event.done.status == "duplicate" and event.done.first_seq:
            yield Duplicate(event.done.first_seq)
            return
        for out in folder.feed(event):
            yield out
            if isinstance(out, OpenAIError):
                return


@dataclass(frozen=True, slots=True)
class Header:
    """What every object of one completion repeats."""

    completion_id: str
    created: int
    model: str
    session_id: str

    def envelope(self, kind: str, choices: list[JsonObject]) -> JsonObject:
        """The fields around ``choices`` (``session_id`` is CodeLab's)."""
        return {
            "id": self.completion_id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "session_id": self.session_id,
        }


def completion_object(
    head: Header,
    text: str,
    calls: list[ToolCallOut],
    usage: JsonObject,
    extras: list[JsonObject],
) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = [call.part(call.arguments) for call in calls]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": "tool_calls" if calls else "stop",
    }
    return {**head.envelope("chat.completion", [choice]), "usage": usage, "codelab_events": extras}


class ChunkWriter:
    """SSE frames of one streamed completion, in OpenAI's order and shapes."""

    def __init__(self, head: Header, include_usage: bool) -> None:
        self.head = head
        self.include_usage = include_usage
        self.calls = 0

    def frame(self, body: JsonObject) -> str:
        return f"data: {dumps(body)}\n\n"

    def chunk(self, delta: JsonObject, finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        body = self.head.envelope(CHUNK, [choice])
        if self.include_usage:
            body["usage"] = None  # OpenAI sends null on every chunk but the last
        return self.frame(body)

    def tool_call(self, call: ToolCallOut) -> list[str]:
        """The header delta (index, id, type, name), then the arguments."""
        index, self.calls = self.calls, self.calls + 1
        frames = [self.chunk({"tool_calls": [{"index": index, **call.part("")}]})]
        if call.arguments:
            fragment = {"index": index, "function": {"arguments": call.arguments}}
            frames.append(self.chunk({"tool_calls": [fragment]}))
        return frames


async def stream_frames(
    outputs: AsyncIterator[Output],
    writer: ChunkWriter,
    usage: Callable[[], Awaitable[JsonObject]],
    finish: Callable[[bool], None],
) -> AsyncIterator[str]:
    """The SSE body: role chunk, deltas, finish chunk, optional usage chunk, ``[DONE]``.

    Past the first byte the status is 200, so an error is a ``data: {"error"}`` frame
    (the SDK raises APIError on it). ``finish(True)`` once every leg was read to its end
    without an error, else ``finish(False)`` (the client left, the stream failed).
    """
    finished = False
    try:
        yield writer.chunk({"role": "assistant", "content": ""})
        async for out in outputs:
            if isinstance(out, OpenAIError):
                yield writer.frame(out.body())
                yield DONE_FRAME
                return
            if isinstance(out, str):
                yield writer.chunk({"content": out})
            else:
                for frame in writer.tool_call(out):
                    yield frame
        finished = True
        yield writer.chunk({}, "tool_calls" if writer.calls else "stop")
        if writer.include_usage:
            yield writer.frame({**writer.head.envelope(CHUNK, []), "usage": await usage()})
        yield DONE_FRAME
    finally:
        finish(finished)
