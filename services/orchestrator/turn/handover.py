"""Seed 000's context hand-over: what the agent that takes a session over is told.

The history already carries every message and tool result; the system prompt adds the
agent it takes over from, why, and the session's context metadata: the last error, the
files modified, the pending tasks and the user's preferences (what the client set, and
what the runtime knows from its own records).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.orchestrator.agents.templates import ORCHESTRATOR, AgentTemplate
from services.orchestrator.state.store import SessionRow, SessionStore, StoredMessage

ERROR_CHARS = 500
NAMED = "requested by the user"
"""Why the session switches to the agent a user message names."""


@dataclass(frozen=True)
class Handover:
    """The context of a session for the agent now serving it."""

    previous_agent: str = ""
    reason: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """last_error, files_modified, pending_tasks, user_preferences and the client's keys."""


def _pending(steps: Any) -> list[str]:
    return [s["desc"] for s in steps or () if s.get("status") in ("pending", "blocked")]


@dataclass(frozen=True)
class SessionContext:
    """What the hand-over is made of, for any agent: the last switch and the metadata."""

    last_switch: Mapping[str, Any]
    metadata: Mapping[str, Any]


def session_context(raw: Mapping[str, Any]) -> SessionContext:
    """The hand-over context from what the store read beside the history."""
    metadata: dict[str, Any] = dict(raw.get("metadata") or {})
    known = {
        "last_error": (raw.get("last_error") or "")[:ERROR_CHARS],
        "files_modified": raw.get("files_modified"),
        "pending_tasks": _pending(raw.get("plan_steps")),
    }
    metadata.update({key: value for key, value in known.items() if value})
    return SessionContext(raw.get("last_switch") or {}, metadata)


async def read_turn(
    store: SessionStore, session_id: str
) -> tuple[list[StoredMessage], SessionContext]:
    """What a model call of the session reads, in one round trip: the history the model
    reads and the hand-over context."""
    history, raw = await store.turn_context(session_id)
    return history, session_context(raw)


def handover_for(context: SessionContext, agent: str) -> Handover:
    """``agent``'s hand-over (no previous agent when it was not switched to)."""
    switch = context.last_switch
    if switch.get("to_agent") != agent or switch.get("from_agent") == agent:
        return Handover(metadata=context.metadata)
    return Handover(switch["from_agent"], switch.get("reason", ""), context.metadata)


def handed_again(handover: Handover, agent: str, multi_agent: bool) -> bool:
    """Whether the next message naming ``agent`` hands it the session as ``handover`` did
    (the system prompt says who had it and why). In multi-agent mode another agent's task
    ends by giving the session back to the orchestrator, and the next message naming it
    switches to it anew, for the reason ``NAMED``; otherwise nothing switches and the
    hand-over stays as it was."""
    if not multi_agent or agent == ORCHESTRATOR:
        return True
    return handover.previous_agent == ORCHESTRATOR and handover.reason == NAMED


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(f"\n- {item}" for item in value)
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


LABELS = {
    "last_error": "Last error",
    "files_modified": "Files modified",
    "pending_tasks": "Pending tasks",
    "user_preferences": "User preferences",
}


def handover_prompt(handover: Handover) -> str:
    """The system prompt's context section (empty when there is nothing to tell)."""
    lines: list[str] = []
    if handover.previous_agent:
        lines += [
            f"Previous agent: {handover.previous_agent}",
            f"Reason for switch: {handover.reason or 'not given'}",
        ]
    for key, value in handover.metadata.items():
        if value in (None, "", [], {}):
            continue
        label = LABELS.get(key, key.replace("_", " ").capitalize())
        text = _text(value)
        lines.append(f"{label}:{text}" if text.startswith("\n") else f"{label}: {text}")
    return "Context:\n" + "\n".join(lines) if lines else ""


def system_prompt(
    template: AgentTemplate, session: SessionRow, handover: Handover | None = None
) -> str:
    """A model call's system prompt: the template's, the session's own, then the hand-over
    context (the history and any summary of it follow, see compaction.py)."""
    system = template.system_prompt
    if session.system_prompt:
        system += "\n\n" + session.system_prompt
    context = handover_prompt(handover) if handover else ""
    if context:
        system += "\n\n" + context
    return system
