"""What an OpenAI-compatible provider demands of a conversation's history."""

from __future__ import annotations

from typing import Any


def history_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Every assistant tool call answered by a tool message before the next turn, and
    no tool message without its call. Empty list: the provider accepts it."""
    problems: list[str] = []
    open_ids: set[str] = set()
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            if message.get("tool_call_id") not in open_ids:
                problems.append(f"#{index}: tool message for unknown call")
            open_ids.discard(message.get("tool_call_id", ""))
            continue
        if open_ids:
            problems.append(f"#{index}: {role} message while calls {sorted(open_ids)} are open")
            open_ids.clear()
        if role == "assistant":
            open_ids = {c["id"] for c in message.get("tool_calls") or []}
    if open_ids:
        problems.append(f"calls {sorted(open_ids)} never answered")
    return problems
