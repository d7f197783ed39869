"""A streamed chat completion put together from its chunks (OpenAI's chunk JSON, decoded).

Pure: no I/O, so every upstream's stream shape can be tested as data. Text is handed
out as it comes (reasoning beside it, from the ``reasoning_content`` field of vLLM and
DeepSeek or the ``reasoning`` field of OpenRouter); tool calls are assembled from their
deltas and handed out whole at the end, with the finish reason, usage and model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.llmproxy.errors import LlmError, LlmStreamInterrupted


@dataclass
class PartialCall:
    """A tool call while its deltas arrive."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class Assembly:
    """Everything one streamed completion said so far."""

    model: str = ""
    finish_reason: str = ""
    usage: dict[str, Any] | None = None
    calls: dict[int, PartialCall] = field(default_factory=dict)
    text_chars: int = 0
    reasoning_chars: int = 0
    reasoning: list[str] = field(default_factory=list)
    """Reasoning received and not yet handed out (the caller drains it)."""
    done: bool = False

    def add(self, chunk: Any) -> str:
        """Take one decoded chunk; return the answer text it carries ('' for none)."""
        if not isinstance(chunk, dict):
            raise LlmStreamInterrupted(f"upstream sent a chunk that is not an object: {chunk!r}")
        if "error" in chunk and not chunk.get("choices"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise LlmError(f"upstream reported an error mid-stream: {message}")
        self.model = chunk.get("model") or self.model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        text = ""
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                text = content if not text else text + content
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought and isinstance(thought, str):
                self.reasoning.append(thought)
                self.reasoning_chars += len(thought)
            for part in delta.get("tool_calls") or ():
                self._call_delta(part)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.text_chars += len(text)
        return text

    def _call_delta(self, part: dict[str, Any]) -> None:
        index = part.get("index")
        if not isinstance(index, int):
            # Without an index (Gemini's and Mistral's compatible APIs, older Ollama) a new
            # id starts a new call; a delta without one continues the last call.
            index = max(self.calls) if self.calls else 0
            last = self.calls.get(index)
            new_id = part.get("id")
            if last is not None and new_id and last.id and new_id != last.id:
                index += 1
        call = self.calls.setdefault(index, PartialCall())
        call.id = part.get("id") or call.id
        function = part.get("function") or {}
        call.name = function.get("name") or call.name
        arguments = function.get("arguments")
        if arguments:
            call.arguments.append(arguments)

    def tool_calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) of every call, in index order."""
        return [
            (c.id or f"call_{i}", c.name, "".join(c.arguments))
            for i, c in sorted(self.calls.items())
        ]

    def take_reasoning(self) -> str:
        """The reasoning received since the last call, joined ('' for none)."""
        if not self.reasoning:
            return ""
        joined = "".join(self.reasoning)
        self.reasoning.clear()
        return joined

    def tokens(self) -> tuple[int | None, int | None]:
        """(prompt, completion) as the upstream reported them, None where it did not."""
        if not self.usage:
            return None, None
        return self.usage.get("prompt_tokens"), self.usage.get("completion_tokens")

    def reasoning_tokens(self) -> int | None:
        """Reasoning tokens as reported (``completion_tokens_details``), None when not."""
        details = (self.usage or {}).get("completion_tokens_details")
        value = details.get("reasoning_tokens") if isinstance(details, dict) else None
        return value if isinstance(value, int) else None
