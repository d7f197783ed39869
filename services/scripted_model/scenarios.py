"""Scenario data model and the queue that hands scenarios out to requests.

A scenario describes exactly one completion response. Tests enqueue scenarios
(over HTTP or in Python) and each chat-completion request takes the first
eligible one; requests that find none get the default behaviour.
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.scripted_model.errors import ScenarioError

_SCENARIO_KEYS = frozenset(
    {
        "match", "text", "tool_calls", "error", "times", "repeat", "token_delay_ms",
        "first_token_delay_ms", "chunk_size", "disconnect_after_chunks", "finish_reason", "usage",
        "reasoning", "reasoning_field", "raw_chunks", "recall",
    }
)  # fmt: skip
_FINISH_REASONS = frozenset({"stop", "tool_calls", "length", "content_filter"})
# vLLM and DeepSeek stream reasoning as `reasoning_content`, OpenRouter as `reasoning`.
REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """One function call the assistant makes. `arguments` as a str is sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """An HTTP error the upstream answers with instead of a completion."""

    status: int
    message: str
    type: str | None = None
    code: str | None = None
    retry_after: float | None = None
    """Sent as the ``Retry-After`` header (seconds), as rate limits are."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """Script for one completion response; every field is optional."""

    match: str | None = None
    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    error: ErrorSpec | None = None
    times: int = 1
    repeat: bool = False
    token_delay_ms: int | None = None
    first_token_delay_ms: int = 0
    chunk_size: int | None = None
    disconnect_after_chunks: int | None = None
    finish_reason: str | None = None
    usage: Mapping[str, int] | None = None
    reasoning: str | None = None
    """Reasoning streamed before the answer, in ``reasoning_field`` deltas."""
    reasoning_field: str = REASONING_FIELDS[0]
    raw_chunks: tuple[Mapping[str, Any], ...] | None = None
    """Stream exactly these chunk objects (a provider's recorded shape), then ``[DONE]``."""
    recall: str | None = None
    """A regex: answer with its first match in the prompt's messages (what a model can
    only say when the prompt still carries it), or "I do not remember."."""

    @classmethod
    def from_dict(cls, data: Any) -> Scenario:
        """Validate a JSON scenario; raises ScenarioError with a readable message."""
        if not isinstance(data, Mapping):
            raise ScenarioError("a scenario must be a JSON object")
        unknown = sorted(set(data) - _SCENARIO_KEYS)
        if unknown:
            raise ScenarioError(f"unknown scenario field(s): {', '.join(unknown)}")
        finish_reason = _opt(data, "finish_reason", str)
        if finish_reason is not None and finish_reason not in _FINISH_REASONS:
            raise ScenarioError(f"finish_reason must be one of {sorted(_FINISH_REASONS)}")
        return cls(
            match=_opt(data, "match", str),
            text=_opt(data, "text", str),
            tool_calls=_tool_calls(data.get("tool_calls")),
            error=_error(data.get("error")),
            times=_count(data, "times", minimum=1) or 1,
            repeat=bool(_opt(data, "repeat", bool)),
            token_delay_ms=_count(data, "token_delay_ms", minimum=0),
            first_token_delay_ms=_count(data, "first_token_delay_ms", minimum=0) or 0,
            chunk_size=_count(data, "chunk_size", minimum=1),
            disconnect_after_chunks=_count(data, "disconnect_after_chunks", minimum=0),
            finish_reason=finish_reason,
            usage=_usage(data.get("usage")),
            reasoning=_opt(data, "reasoning", str),
            reasoning_field=_reasoning_field(data),
            raw_chunks=_raw_chunks(data.get("raw_chunks")),
            recall=_pattern(data),
        )


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise ScenarioError(f"{key} must be a {kind.__name__}")
    return value


def _pattern(data: Mapping[str, Any]) -> str | None:
    pattern: str | None = _opt(data, "recall", str)
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ScenarioError(f"recall is not a regular expression: {error}") from None
    return pattern


def _raw_chunks(raw: Any) -> tuple[Mapping[str, Any], ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(c, Mapping) for c in raw):
        raise ScenarioError("raw_chunks must be a list of chunk objects")
    return tuple(raw)


def _reasoning_field(data: Mapping[str, Any]) -> str:
    field_name = _opt(data, "reasoning_field", str) or REASONING_FIELDS[0]
    if field_name not in REASONING_FIELDS:
        raise ScenarioError(f"reasoning_field must be one of {list(REASONING_FIELDS)}")
    return str(field_name)


def _count(data: Mapping[str, Any], key: str, *, minimum: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    # bool is an int subclass; `true` is never a sensible count.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScenarioError(f"{key} must be an integer >= {minimum}")
    return value


def _tool_calls(raw: Any) -> tuple[ToolCallSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScenarioError("tool_calls must be a list")
    calls = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise ScenarioError("each tool call must be an object")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError("each tool call needs a non-empty string name")
        arguments = item.get("arguments", {})
        if not isinstance(arguments, dict | str):
            raise ScenarioError("tool call arguments must be an object (or a raw JSON string)")
        calls.append(ToolCallSpec(name=name, arguments=arguments, id=_opt(item, "id", str)))
    return tuple(calls)


def _error(raw: Any) -> ErrorSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ScenarioError("error must be an object")
    status = raw.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ScenarioError("error.status must be an HTTP error status (400..599)")
    message = raw.get("message", f"Scripted upstream error {status}")
    if not isinstance(message, str):
        raise ScenarioError("error.message must be a string")
    wait = raw.get("retry_after")
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float)):
        raise ScenarioError("error.retry_after must be a number of seconds")
    if wait is not None and wait < 0:
        raise ScenarioError("error.retry_after must not be negative")
    return ErrorSpec(status, message, _opt(raw, "type", str), _opt(raw, "code", str), wait)


def _usage(raw: Any) -> Mapping[str, int] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ScenarioError("usage must be an object")
    usage = {}
    for key in ("prompt_tokens", "completion_tokens"):
        if key in raw:
            usage[key] = _count(raw, key, minimum=0) or 0
    return usage


@dataclass(slots=True)
class _Queued:
    scenario: Scenario
    remaining: int


REQUEST_LOG = 1000
"""Request bodies kept: the most recent. A log for tests, not an archive: kept whole, it
grew with every call of a long-running model, and a bench holding the 3,200 bodies of its
burst passes saw every process of the mesh spend 20-30 % more CPU in the live pass after
them (the 1,000-session turn at 3-3.7x the 100-session one instead of 1.8x)."""


class _Log:
    """The latest ``REQUEST_LOG`` entries of one kind, guarded by a lock of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=REQUEST_LOG)

    def append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        """Most recent last (a copy)."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> int:
        """Forget every entry; returns how many there were."""
        with self._lock:
            dropped = len(self._entries)
            self._entries.clear()
        return dropped


STREAM_TEXT = 200
"""Characters of a stream's last user message kept in its log entry: enough to tell the
streams of a benchmark's sessions apart."""


class ScriptedModelState:
    """The scenario queue, the log of the latest chat-completion requests received, and
    the log of when the latest streams sent their content (``streams``).

    Shared by the HTTP control endpoints and in-process tests. A lock guards it
    because tests may drive it from another thread than the server's loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._requests = _Log()
        self._streams = _Log()
        self.context_window: int | None = None
        """Set: a prompt of more tokens is refused as OpenAI refuses it (400,
        ``context_length_exceeded``), before any scenario is taken."""

    def enqueue(self, *scenarios: Scenario | Mapping[str, Any]) -> int:
        """Append scenarios (objects or JSON dicts) to the queue; returns how many."""
        parsed = [s if isinstance(s, Scenario) else Scenario.from_dict(s) for s in scenarios]
        with self._lock:
            self._queue.extend(_Queued(s, s.times) for s in parsed)
        return len(parsed)

    def clear(self) -> int:
        """Drop every queued scenario; returns how many were dropped."""
        with self._lock:
            dropped = len(self._queue)
            self._queue.clear()
        return dropped

    def pending(self) -> list[Scenario]:
        """Scenarios still queued, in order."""
        with self._lock:
            return [q.scenario for q in self._queue]

    def take(self, last_user_text: str) -> Scenario | None:
        """Pop the first scenario eligible for a request whose last user message is given."""
        with self._lock:
            for position, queued in enumerate(self._queue):
                match = queued.scenario.match
                if match is not None and match not in last_user_text:
                    continue
                if not queued.scenario.repeat:
                    queued.remaining -= 1
                    if queued.remaining <= 0:
                        del self._queue[position]
                return queued.scenario
        return None

    def record(self, body: dict[str, Any]) -> None:
        """Remember a chat-completion request body."""
        self._requests.append(body)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The latest ``REQUEST_LOG`` chat-completion request bodies, most recent last (a
        copy)."""
        return self._requests.entries()

    def clear_requests(self) -> int:
        """Forget the recorded requests; returns how many there were."""
        return self._requests.clear()

    def record_stream(self, last_user_text: str, sent: Sequence[float]) -> None:
        """Remember when a streamed answer to ``last_user_text`` handed its content writes
        to the server (wall-clock seconds): the pace the model itself kept."""
        self._streams.append(
            {
                "last_user": last_user_text[:STREAM_TEXT],
                "writes": len(sent),
                "first_at": sent[0],
                "last_at": sent[-1],
            }
        )

    @property
    def streams(self) -> list[dict[str, Any]]:
        """The latest ``REQUEST_LOG`` streams' content timing, most recent last (a copy)."""
        return self._streams.entries()

    def clear_streams(self) -> int:
        """Forget the streams' timing; returns how many there were."""
        return self._streams.clear()
