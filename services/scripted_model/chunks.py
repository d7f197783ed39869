"""OpenAI-exact response objects: completions, stream chunks, usage, errors, SSE body.

Field names and nesting follow the public OpenAI chat-completions API so the
official SDK parses everything unchanged; see `stream_chunks` for the order
of streamed deltas.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import re
import string
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Send

from services.scripted_model.scenarios import REASONING_FIELDS, ToolCallSpec

JsonObject = dict[str, Any]

# Rough, deterministic "tokens": words and single punctuation marks.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# Word-sized text pieces; leading whitespace sticks to the word, so joining is lossless.
_PIECE_RE = re.compile(r"\s*\S+|\s+")
_ALPHABET = string.ascii_letters + string.digits
# Overhead per message, roughly what OpenAI charges for role and separators.
_MESSAGE_OVERHEAD = 3
# Streamed tool arguments are cut into at most this many fragments.
_ARGUMENT_FRAGMENTS = 6


# Ids only need to be unique, not unguessable (a system source per character was a twentieth
# of the model's CPU under load).
_IDS = random.Random()


def _random_suffix(length: int) -> str:
    return "".join(_IDS.choices(_ALPHABET, k=length))


def new_completion_id() -> str:
    return "chatcmpl-" + _random_suffix(29)


def new_call_id() -> str:
    return "call_" + _random_suffix(24)


@functools.lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    """Deterministic rough tokens; remembered per text, as a history is sent again with
    every call (what prefix caching does for a real model)."""
    return len(_TOKEN_RE.findall(text))


def truncate_to_tokens(text: str, limit: int) -> str:
    """Keep the first `limit` tokens of text (and the whitespace between them)."""
    if limit <= 0:
        return ""
    for position, token in enumerate(_TOKEN_RE.finditer(text), start=1):
        if position == limit:
            return text[: token.end()]
    return text


def content_text(content: Any) -> str:
    """Text of a message `content`: a string or a list of typed parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def count_prompt_tokens(messages: Sequence[Any], tools: Any) -> int:
    """The prompt's tokens as the model reads them: contents, reasoning sent back (either
    field), calls and the tool schemas."""
    total = 0
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        total += _MESSAGE_OVERHEAD + count_tokens(content_text(message.get("content")))
        for field_name in REASONING_FIELDS:
            total += count_tokens(content_text(message.get(field_name)))
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                total += count_tokens(_json_text(call.get("function", {})))
    if tools:
        total += count_tokens(_json_text(tools))
    return total


def _json_bytes(value: Any) -> bytes:
    """Compact JSON (orjson; the standard library for what it refuses: integers past 64
    bits). Built for every streamed chunk and every prompt's tools."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _json_text(value: Any) -> str:
    return _json_bytes(value).decode()


def split_text(text: str, chunk_size: int | None) -> list[str]:
    """Word-sized pieces, or fixed `chunk_size`-character pieces when given."""
    if chunk_size:
        return [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)]
    return _PIECE_RE.findall(text)


def split_arguments(arguments: str) -> list[str]:
    """Cut a JSON string into several fragments so clients must really reassemble it."""
    if not arguments:
        return []
    size = max(1, math.ceil(len(arguments) / _ARGUMENT_FRAGMENTS))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


@dataclass(frozen=True, slots=True)
class ToolCallOut:
    """A tool call as sent: id assigned and arguments serialised."""

    id: str
    name: str
    arguments: str

    @classmethod
    def from_spec(cls, spec: ToolCallSpec) -> ToolCallOut:
        arguments = spec.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return cls(id=spec.id or new_call_id(), name=spec.name, arguments=arguments)

    def as_message_part(self) -> JsonObject:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Reply:
    """Everything one completion says, independent of streaming or not."""

    text: str | None
    tool_calls: tuple[ToolCallOut, ...]
    finish_reason: str
    usage: JsonObject
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"


def usage_dict(prompt_tokens: int, completion_tokens: int) -> JsonObject:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def build_reply(
    *,
    text: str | None,
    tool_calls: Sequence[ToolCallSpec],
    prompt_tokens: int,
    max_tokens: int | None,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
    reasoning: str | None = None,
    reasoning_field: str = "reasoning_content",
) -> Reply:
    """Assemble the reply, applying `max_tokens` truncation and usage overrides."""
    calls = tuple(ToolCallOut.from_spec(spec) for spec in tool_calls)
    reason = "tool_calls" if calls else "stop"
    if text and not calls and max_tokens is not None and count_tokens(text) > max_tokens:
        text, reason = truncate_to_tokens(text, max_tokens), "length"
    thinking = count_tokens(reasoning or "")
    completion = (
        thinking
        + count_tokens(text or "")
        + sum(count_tokens(c.name) + count_tokens(c.arguments) for c in calls)
    )
    usage = usage or {}
    totals = usage_dict(
        usage.get("prompt_tokens", prompt_tokens), usage.get("completion_tokens", completion)
    )
    if reasoning:
        totals["completion_tokens_details"] = {"reasoning_tokens": thinking}
    return Reply(
        text=text,
        tool_calls=calls,
        finish_reason=finish_reason or reason,
        usage=totals,
        reasoning=reasoning,
        reasoning_field=reasoning_field,
    )


def completion_object(completion_id: str, created: int, model: str, reply: Reply) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.reasoning:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [call.as_message_part() for call in reply.tool_calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
        ],
        "usage": reply.usage,
    }


def stream_chunks(
    completion_id: str,
    created: int,
    model: str,
    reply: Reply,
    *,
    chunk_size: int | None,
    include_usage: bool,
) -> list[JsonObject]:
    """All chunks of a streamed reply, in OpenAI's order.

    Role chunk, reasoning pieces, content pieces, per tool call a header delta (id, type, name,
    empty arguments) and argument fragments, the finish chunk, and with
    `include_usage` a final chunk with no choices that carries the usage.
    """

    def chunk(delta: JsonObject, finish_reason: str | None = None) -> JsonObject:
        body: JsonObject = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            body["usage"] = None
        return body

    chunks = [chunk({"role": "assistant", "content": ""})]
    field_name = reply.reasoning_field
    chunks += [chunk({field_name: piece}) for piece in split_text(reply.reasoning or "", None)]
    chunks += [chunk({"content": piece}) for piece in split_text(reply.text or "", chunk_size)]
    for index, call in enumerate(reply.tool_calls):
        header = {"name": call.name, "arguments": ""}
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call.id, "type": "function", "function": header}
                    ]
                }
            )
        )
        for fragment in split_arguments(call.arguments):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            )
    chunks.append(chunk({}, reply.finish_reason))
    if include_usage:
        final = chunk({})
        final["choices"], final["usage"] = [], reply.usage
        chunks.append(final)
    return chunks


def error_body(
    message: str,
    error_type: str = "invalid_request_error",
    *,
    param: str | None = None,
    code: str | None = None,
) -> JsonObject:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def sse_event(data: JsonObject | str) -> bytes:
    if isinstance(data, dict):
        return b"data: " + _json_bytes(data) + b"\n\n"
    return f"data: {data}\n\n".encode()


def has_content(chunk: Any) -> bool:
    """Whether a (possibly malformed, raw) chunk carries content text."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not isinstance(choices, list):
        return False
    deltas = (c.get("delta") for c in choices if isinstance(c, dict))
    return any(isinstance(d, dict) and bool(d.get("content")) for d in deltas)


def due_after(position: int, first_delay: float, delay: float) -> float:
    """Seconds from the stream's start to chunk ``position``: on a schedule, as a model
    generates, so a late write (a busy box) does not push every later chunk back and the
    pace stays the scenario's."""
    if position <= 0:
        return 0.0
    return first_delay + (position - 1) * delay


class EventStream(StreamingResponse):
    """SSE body with pacing; `cut_after` ends it mid-body like a broken upstream.

    Returning from `stream_response` without the final empty body message makes
    uvicorn close the connection, so the client sees an incomplete chunked body.
    `on_sent`, when given, is told the wall-clock times (``time.time()``) at which the
    chunks that carry content text were handed to the server, once the body ends: what
    the model actually sent, late or not, for a caller that compares a pace kept
    downstream with the pace the upstream itself kept.
    """

    def __init__(
        self,
        chunks: list[dict[str, Any]],
        delay: float,
        first_delay: float,
        cut_after: int | None,
        on_sent: Callable[[list[float]], None] | None = None,
    ) -> None:
        self._chunks, self._delay, self._first_delay = chunks, delay, first_delay
        self._cut_after = cut_after
        self._on_sent = on_sent
        self._sent: list[float] = []
        super().__init__(
            self._paced(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    async def _paced(self) -> AsyncIterator[bytes]:
        chunks = self._chunks[: self._cut_after]
        finished = len(chunks) == len(self._chunks)
        clock = asyncio.get_running_loop().time
        start = clock()
        for position, chunk in enumerate(chunks):
            if position > 0:
                due = start + due_after(position, self._first_delay, self._delay)
                await asyncio.sleep(max(0.0, due - clock()))
            if position > 0 and not self._delay:
                # No pace: the rest of the answer goes in one write, as an upstream that
                # generates faster than the network sends would deliver it.
                rest = [sse_event(c) for c in chunks[position:]]
                if finished:
                    rest.append(sse_event("[DONE]"))
                self._note(chunks[position:])
                yield b"".join(rest)
                return
            self._note((chunk,))
            yield sse_event(chunk)
        if finished:
            yield sse_event("[DONE]")

    def _note(self, chunks: Sequence[Any]) -> None:
        if self._on_sent is not None and any(map(has_content, chunks)):
            self._sent.append(time.time())

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            if self._on_sent is not None and self._sent:
                self._on_sent(self._sent)
        if self._cut_after is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
