"""Proto -> JSON for the REST endpoints, one function per response shape.

The mesh's JSON rule is the one translate.event_to_json applies to events: a
``<x>_json`` string carries exact JSON and is shown, decoded, as ``<x>``.
``proto_json`` applies it to any message (recursively, for nested tool calls);
the functions below only rename or pick fields where the seeds want other names.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from codelab.v1 import access_pb2, hitl_pb2, llmproxy_pb2, runtime_pb2

JSON_SUFFIX = "_json"


def decode_json(raw: str) -> Any:
    """A ``<x>_json`` value; empty is None.

    Model-produced arguments may be broken JSON: a history must still render,
    so such a value is shown as the raw string rather than failing the request.
    """
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key.endswith(JSON_SUFFIX) and isinstance(item, str):
                out[key[: -len(JSON_SUFFIX)]] = decode_json(item)
            else:
                out[key] = _decoded(item)
        return out
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    return value


def proto_json(message: Message) -> dict[str, Any]:
    """Every field by its proto name (unset ``optional`` ones left out), ``_json`` decoded.

    int64 fields come out as strings (the protobuf JSON mapping); callers with
    int64 fields set those themselves.
    """
    fields = json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    decoded: dict[str, Any] = _decoded(fields)
    return decoded


def agent(info: runtime_pb2.AgentInfo) -> dict[str, Any]:
    """Seed 002's agent entry; seed 000 shows no restrictions as ``null``."""
    return {
        "type": info.agent_type,
        "name": info.name,
        "description": info.description,
        "allowed_tools": list(info.allowed_tools),
        "has_file_restrictions": info.has_file_restrictions,
        "file_restrictions": list(info.file_restrictions) or None,
    }


def current_agent(current: runtime_pb2.CurrentAgent) -> dict[str, Any]:
    """Seed 002's agent entry for the session's agent, plus seed 000's switch fields."""
    described = agent(current.agent)
    del described["file_restrictions"]
    return {
        "session_id": current.session_id,
        **described,
        "type": current.agent.agent_type or current.current_agent,
        "current_agent": current.current_agent,
        "switch_count": current.switch_count,
        "last_switch_at": current.last_switch_at or None,
    }


SESSION_FIELDS = (
    "session_id", "title", "created_at", "last_activity", "is_active", "message_count",
)  # fmt: skip


def session(row: runtime_pb2.Session) -> dict[str, Any]:
    """A session as listed (the owner and agent stay inside the mesh)."""
    return {name: getattr(row, name) for name in SESSION_FIELDS}


def history(reply: runtime_pb2.History) -> dict[str, Any]:
    """Messages with ``tool_calls`` as ``[{id, name, arguments}]``."""
    return {
        "session_id": reply.session_id,
        "messages": [_history_message(m) for m in reply.messages],
    }


def _history_message(message: runtime_pb2.HistoryMessage) -> dict[str, Any]:
    out = proto_json(message)
    if not out.get("tool_calls"):
        # Only assistant messages that called tools carry the key (seed 000's example).
        out.pop("tool_calls", None)
    return out


def pending_approval(item: runtime_pb2.PendingApproval) -> dict[str, Any]:
    """A tool or plan approval in the fields its type has (seed 000 / seed 002)."""
    if item.type == "plan_approval":
        summary = item.plan_summary
        return {
            "type": item.type,
            "approval_request_id": item.approval_request_id,
            "plan_id": item.plan_id if item.HasField("plan_id") else None,
            "plan_summary": {
                "goal": summary.goal,
                "subtasks_count": summary.subtasks_count,
                "total_estimated_time": summary.total_estimated_time,
            },
            "created_at": item.created_at,
        }
    return {
        "type": item.type or "tool_approval",
        "call_id": item.call_id,
        "tool_name": item.tool_name,
        "arguments": decode_json(item.arguments_json) or {},
        "reason": item.reason,
        "created_at": item.created_at,
        "expires_at": item.expires_at,
        "timeout_seconds": item.timeout_seconds,
    }


def usage(row: llmproxy_pb2.SessionUsage) -> dict[str, Any]:
    """Seed 002 §7: one session's LLM usage."""
    return proto_json(row)


def totals(row: llmproxy_pb2.SessionUsage) -> dict[str, Any]:
    """The usage of every session (no session id)."""
    out = usage(row)
    del out["session_id"]
    return out


def event_stats(stats: runtime_pb2.EventStats) -> dict[str, Any]:
    """Event counts; built by hand because int64 would render as strings."""
    return {
        "total_events": stats.total_events,
        "events_by_type": dict(stats.events_by_type),
        "sessions": stats.sessions,
        "active_sessions": stats.active_sessions,
        "agent_switches": stats.agent_switches,
    }


AUDIT_OPTIONAL = ("original_arguments", "modified_arguments", "feedback")


def audit_entry(entry: hitl_pb2.AuditEntry) -> dict[str, Any]:
    """An audit row; absent optional fields are ``null`` so every entry has the same keys."""
    out = proto_json(entry)
    out.pop("details", None)
    out["id"] = entry.id  # int64
    for name in AUDIT_OPTIONAL:
        out.setdefault(name, None)
    return out


def limits(report: access_pb2.LimitsReport) -> dict[str, Any]:
    """The caller's usage against each per-key limit (``limit`` 0: off)."""
    return {
        item.name: {
            "used": round(item.used, 6),
            "limit": item.limit,
            "remaining": max(item.limit - item.used, 0) if item.limit else None,
            "resets_in": round(item.resets_in, 3),
        }
        for item in report.limits
    }
