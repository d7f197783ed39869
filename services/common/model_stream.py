"""What a streamed model reply is made of: one union on both sides of the llmproxy wire.

llmproxy's upstream assembles these from the provider's chunks and its servicer sends
them as ``CompleteChunk``; the orchestrator's client turns each ``CompleteChunk`` back
into the same value. A reply is text and reasoning pieces and whole tool calls, in the
order the model produced them, closed by exactly one ``ModelFinished``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextPiece:
    """A piece of the answer's text."""

    text: str


@dataclass(frozen=True)
class ReasoningPiece:
    """A piece of the model's reasoning (shown to the user, kept for the trace; never part
    of the answer)."""

    text: str


@dataclass(frozen=True)
class ModelToolCall:
    """A whole tool call proposed by the model, assembled from its deltas (arguments
    exactly as produced)."""

    id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class ModelFinished:
    """The end of the model's reply, with the upstream's usage."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str = ""
    reasoning_tokens: int = 0
    """Reasoning tokens, as reported or estimated (a part of ``completion_tokens``)."""


ModelOutput = TextPiece | ReasoningPiece | ModelToolCall | ModelFinished
