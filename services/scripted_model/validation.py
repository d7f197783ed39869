"""What the real chat-completions API refuses, refused the same way (400, same wording).

A fake that accepts anything lets code pass tests that production rejects: names outside
``^[a-zA-Z0-9_-]{1,64}$`` (in ``tools``, in the history's ``tool_calls`` and in any
message's ``name``, a tool result's included), a ``tool`` message that answers no call of
the assistant message before it, an unknown ``tool_call_id``, and an assistant's calls
left without their answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from services.scripted_model.errors import RequestRefused

NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
_NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
MAX_NAME = 64


def check_name(name: Any, param: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise RequestRefused(
            f"Invalid '{param}': string does not match pattern. "
            f"Expected a string that matches the pattern '{NAME_PATTERN}'.",
            param,
            "invalid_value",
        )
    if len(name) > MAX_NAME:
        raise RequestRefused(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{MAX_NAME}, but got a string with length {len(name)} instead.",
            param,
            "string_above_max_length",
        )


def check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise RequestRefused("Invalid type for 'tools': expected an array.", "tools", None)
    for i, tool in enumerate(tools):
        check_function(tool, f"tools[{i}]")


def check_function(holder: Any, path: str) -> None:
    """``holder.function`` is an object whose ``name`` the API accepts."""
    function = holder.get("function") if isinstance(holder, Mapping) else None
    if not isinstance(function, Mapping):
        raise RequestRefused(
            f"Missing required parameter: '{path}.function'.",
            f"{path}.function",
            "missing_required_parameter",
        )
    check_name(function.get("name"), f"{path}.function.name")


def _call_ids(message: Mapping[str, Any], index: int) -> list[str]:
    ids = []
    for j, call in enumerate(message.get("tool_calls") or ()):
        check_function(call, f"messages[{index}].tool_calls[{j}]")
        ids.append(str(call.get("id", "")))
    return ids


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Tool calls and their answers pair up exactly as the real API demands."""
    open_ids: list[str] = []
    answered: set[str] = set()
    opened_at = -1
    for i, message in enumerate(messages):
        if message.get("name") is not None:
            check_name(message["name"], f"messages[{i}].name")
        role = message.get("role")
        if role == "tool":
            if opened_at < 0:
                raise RequestRefused(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                    None,
                )
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                raise RequestRefused(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    f"messages.[{i}].tool_call_id",
                    None,
                )
            answered.add(str(call_id))
            continue
        _unanswered(open_ids, answered, opened_at)
        open_ids, answered, opened_at = [], set(), -1
        if role == "assistant" and message.get("tool_calls"):
            open_ids, opened_at = _call_ids(message, i), i
    _unanswered(open_ids, answered, opened_at)


def _unanswered(open_ids: list[str], answered: set[str], index: int) -> None:
    missing = [c for c in open_ids if c not in answered]
    if missing:
        raise RequestRefused(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(missing)}",
            f"messages.[{index}].role",
            None,
        )


def check_request(body: Mapping[str, Any]) -> None:
    """Raise RequestRefused for what the real API would refuse; messages are pre-checked."""
    check_tools(body.get("tools"))
    check_messages(body["messages"])
