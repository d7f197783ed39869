"""The prompt against the agent's context budget: what to summarise, what to cut. Pure.

A prompt is the system prompt, the tool schemas and the session's context (the latest
summary, then every message after what it covers). Its size is a sum of counts made
when each message was written. When it would pass ``COMPACT_AT`` of the window (or the
window less the answer's reserve, whichever is smaller), the older messages are
summarised: the split falls where no tool call is separated from its result, and the
last turns stay verbatim. A tool result too large for what is left is cut, with a marker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.tokens import MESSAGE_OVERHEAD, text_tokens

COMPACT_AT = 0.8
"""Compact when the prompt would pass this share of the window."""
KEEP_SHARE = 0.4
"""After compaction the verbatim tail takes at most this share of the prompt budget."""
MIN_TOOL_RESULT = 64
"""A cut tool result keeps at least this many tokens."""
SUMMARY_ROLE = "summary"
SUMMARY_HEADER = "Summary of the earlier conversation (its messages stay in the history):"
CUT_MARKER = "\n[... {chars} characters cut to fit the context budget ...]\n"
DEFAULT_COMPACTION_PROMPT = (
    "You condense a coding session so that it can go on within the model's context "
    "window. Write a summary of the conversation below: the user's requests in order "
    "(the first one word for word), decisions taken, files read or changed and what was "
    "learnt from them, open questions. Keep names, paths and numbers exact. Start from the "
    "earlier summary when there is one. Answer with the summary only."
)


@dataclass(frozen=True)
class Limits:
    """A template's budget in tokens."""

    window: int
    reserve: int
    """Kept free for the answer (max_output_tokens, at most half the window)."""

    @property
    def prompt(self) -> int:
        """The largest prompt that leaves room for the answer."""
        return self.window - min(self.reserve, self.window // 2)

    @property
    def threshold(self) -> int:
        """Past this the context is compacted before the call."""
        return min(int(self.window * COMPACT_AT), self.prompt)


def is_summary(message: StoredMessage) -> bool:
    return message.role == SUMMARY_ROLE


def context_tokens(history: Sequence[StoredMessage], with_reasoning: bool = False) -> int:
    """The context's size: a sum of stored counts (estimates only for unsaved messages);
    ``with_reasoning``: the answers' reasoning is sent back, so it counts too."""
    return sum(m.prompt_tokens(with_reasoning) for m in history)


def system_with_summary(system: str, history: Sequence[StoredMessage]) -> str:
    """The system prompt, with the summary the context starts with (if any) after it."""
    if history and is_summary(history[0]):
        return f"{system}\n\n{SUMMARY_HEADER}\n{history[0].content}"
    return system


def without_summary(history: Sequence[StoredMessage]) -> list[StoredMessage]:
    return [m for m in history if not is_summary(m)]


def split_point(history: Sequence[StoredMessage], keep: int, with_reasoning: bool = False) -> int:
    """Index where the verbatim tail starts: the earliest user message whose tail fits
    ``keep`` tokens, else the earliest other message that fits, else the latest place
    that is not a tool result (a call is never separated from its result). 0 when
    nothing older can be summarised."""
    tail = 0
    user_cut = any_cut = latest = 0
    for index in range(len(history) - 1, 0, -1):
        message = history[index]
        tail += message.prompt_tokens(with_reasoning)
        if message.role == "tool" or is_summary(message):
            continue
        latest = latest or index
        if tail > keep:
            break
        any_cut = index
        if message.role == "user":
            user_cut = index
    return user_cut or any_cut or latest


def transcript(messages: Sequence[StoredMessage], cap_tokens: int) -> str:
    """The messages as text for the summary request, each cut to ``cap_tokens``."""
    lines = []
    for message in messages:
        if is_summary(message):
            lines.append(f"[earlier summary]\n{message.content}")
            continue
        label = message.role
        if message.role == "tool":
            label = f"tool result of {message.name or 'a tool'}"
        body = cut_text(message.content, message.token_count, cap_tokens)
        for call in message.tool_calls or ():
            body += f"\n(calls {call.get('name')} with {call.get('arguments')})"
        lines.append(f"[{label}] {body}".rstrip())
    return "\n".join(lines)


def chunks_for_summary(
    messages: Sequence[StoredMessage], budget: int, cap_tokens: int
) -> list[list[StoredMessage]]:
    """``messages`` in consecutive groups whose transcripts fit ``budget`` tokens each."""
    groups: list[list[StoredMessage]] = [[]]
    size = 0
    for message in messages:
        cost = min(message.token_count, cap_tokens + MESSAGE_OVERHEAD)
        if groups[-1] and size + cost > budget:
            groups.append([])
            size = 0
        groups[-1].append(message)
        size += cost
    return groups


def cut_text(text: str, tokens: int, limit: int) -> str:
    """``text`` (about ``tokens`` tokens) cut to about ``limit``, head and tail kept."""
    if tokens <= limit or not text:
        return text
    keep_chars = max(1, len(text) * limit // max(tokens, 1))
    head = text[: keep_chars * 2 // 3]
    tail = text[len(text) - keep_chars // 3 :] if keep_chars // 3 else ""
    return head + CUT_MARKER.format(chars=len(text) - len(head) - len(tail)) + tail


def cut_tool_results(
    history: Sequence[StoredMessage], overflow: int
) -> tuple[list[StoredMessage], int]:
    """Cut the largest tool results until ``overflow`` tokens are gone (or nothing is
    left to cut); returns the messages and the tokens saved. Only content changes, so
    every call keeps its result."""
    out = list(history)
    saved = 0
    tools = sorted(
        (i for i, m in enumerate(out) if m.role == "tool"), key=lambda i: -out[i].token_count
    )
    for index in tools:
        if saved >= overflow:
            break
        message = out[index]
        target = max(MIN_TOOL_RESULT, message.token_count - (overflow - saved))
        if target >= message.token_count:
            continue
        content = cut_text(message.content, message.token_count, target)
        tokens = MESSAGE_OVERHEAD + text_tokens(content)
        saved += max(0, message.token_count - tokens)
        out[index] = dataclasses.replace(message, content=content, tokens=tokens)
    return out, saved
