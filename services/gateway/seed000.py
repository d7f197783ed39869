"""Seed 000's SSE shape, opt-in with ``?format=seed000`` for IDE builds that parse it.

Each event becomes ``event: message`` with ``{"type", "data": {...}}``: ``agent_switched``
is seed 000's ``switch_agent`` chunk, a tool call nests under ``data.tool_call`` with
``name``, an error is ``event: error`` with ``data.message``, and a completed turn sends a
``completion`` chunk before ``event: done`` ``{"status": ...}``. Events seed 000 does not
name (plans, statuses, ...) keep their type, their fields under ``data``.
"""

from __future__ import annotations

from typing import Any

FORMAT = "seed000"
ENVELOPE = ("type", "session_id", "seq")
Frame = tuple[str, dict[str, Any]]


class Seed000Shape:
    """Renders one stream's events (remembers the agent for the completion chunk)."""

    def __init__(self) -> None:
        self.agent = ""

    def frames(self, event: dict[str, Any]) -> list[Frame]:
        """(SSE event name, data) pairs for one event as ``event_json`` renders it."""
        kind = event["type"]
        data = {k: v for k, v in event.items() if k not in ENVELOPE}
        if data.get("agent"):
            self.agent = data["agent"]
        if kind == "agent_switched":
            self.agent = data["to_agent"]
            data.pop("content", None)
            return [("message", {"type": "switch_agent", "data": data})]
        if kind == "assistant_message":
            text = data.pop("token", None) or data.pop("content", None) or ""
            if not text:
                return []  # the end marker of streamed text: seed 000 has none
            data["content"] = text
            return [("message", {"type": kind, "data": data})]
        if kind == "tool_call":
            call = {
                "call_id": data.pop("call_id"),
                "name": data.pop("tool_name"),
                "arguments": data.pop("arguments", {}),
            }
            approval = data.pop("requires_approval", False)
            reason = data.pop("reason", None)
            return [
                (
                    "message",
                    {
                        "type": kind,
                        "data": {
                            "tool_call": {**call, **data},
                            "requires_approval": approval,
                            "reason": reason,
                        },
                    },
                )
            ]
        if kind == "error":
            data["message"] = data.pop("content", "")
            return [("error", {"type": kind, "data": data})]
        if kind == "done":
            status = data.get("status", "")
            frames: list[Frame] = []
            if status == "completed":
                completion = {
                    "status": "success",
                    "message": "Task completed successfully",
                    "agent": self.agent,
                }
                frames.append(("message", {"type": "completion", "data": completion}))
            return [*frames, ("done", {"status": status})]
        return [("message", {"type": kind, "data": data})]
