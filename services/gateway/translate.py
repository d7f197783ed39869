"""The one place where the IDE's JSON meets the protos.

Events: ``{"type": <oneof name>, **fields, "session_id", "seq", "timestamp"}``;
a ``<x>_json`` field is decoded and shown as ``<x>``. Client messages: seed 002's
WebSocket shapes, seed 004's spellings (hitl_response/action/edited_arguments)
and seed 000's flat SSE body all become a ``ClientMessage``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from codelab.v1 import common_pb2 as pb
from services.gateway.errors import ProtocolError
from services.gateway.event_json import event_json


def event_to_json(event: pb.ServerEvent) -> dict[str, Any]:
    """A ServerEvent as the IDE sees it."""
    return event_json(event)


def local_error(
    code: str, content: str, session_id: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An error the gateway itself reports (the mesh refused the stream or cannot be reached)."""
    body: dict[str, Any] = {
        "type": "error",
        "error_code": code,
        "content": content,
        "session_id": session_id,
    }
    if details:
        body["details"] = details
    return body


def _text(msg: Mapping[str, Any], *names: str, required: bool = True) -> str | None:
    for name in names:
        value = msg.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ProtocolError("MISSING_REQUIRED_FIELD", f"'{name}' must be a string")
            return value
    if required:
        raise ProtocolError("MISSING_REQUIRED_FIELD", f"{msg.get('type')} requires '{names[0]}'")
    return None


def _object_json(msg: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = msg.get(name)
        if value is not None:
            if not isinstance(value, dict):
                raise ProtocolError("MISSING_REQUIRED_FIELD", f"'{name}' must be an object")
            return json.dumps(value)
    return None


_DECISIONS = {
    "approve": pb.DECISION_APPROVE,
    "approved": pb.DECISION_APPROVE,
    "edit": pb.DECISION_EDIT,
    "edited": pb.DECISION_EDIT,
    "reject": pb.DECISION_REJECT,
    "rejected": pb.DECISION_REJECT,
    "modify": pb.DECISION_MODIFY,
}


def _decision(msg: Mapping[str, Any], allowed: set[int]) -> pb.Decision.ValueType:
    raw = _text(msg, "decision", "action")
    value = _DECISIONS.get((raw or "").strip().lower())
    if value is None or value not in allowed:
        names = sorted(k for k, v in _DECISIONS.items() if v in allowed and not k.endswith("d"))
        raise ProtocolError("INVALID_DECISION", f"decision must be one of {names}, got {raw!r}")
    return value


def _user_message(msg: Mapping[str, Any]) -> pb.ClientMessage:
    content = _text(msg, "content") or ""
    role = _text(msg, "role", required=False) or "user"
    if role not in {"user", "assistant", "system", "tool"}:
        raise ProtocolError("MISSING_REQUIRED_FIELD", f"unknown role {role!r}")
    out = pb.UserMessage(content=content, role=role)
    agent = _text(msg, "agent_type", required=False)
    if agent:
        out.agent_type = agent
    return pb.ClientMessage(user_message=out)


def _tool_result(msg: Mapping[str, Any]) -> pb.ClientMessage:
    out = pb.ToolResult(call_id=_text(msg, "call_id", "tool_call_id") or "")
    result = msg.get("result", msg.get("tool_result"))
    if result is not None:
        out.result_json = json.dumps(result)
    error = msg.get("error")
    if error is not None:
        out.error = error if isinstance(error, str) else json.dumps(error)
    for name in ("plan_id", "step_id"):
        value = _text(msg, name, required=False)
        if value:
            setattr(out, name, value)
    return pb.ClientMessage(tool_result=out)


def _switch_agent(msg: Mapping[str, Any]) -> pb.ClientMessage:
    out = pb.SwitchAgent(
        agent_type=_text(msg, "agent_type") or "",
        content=_text(msg, "content", required=False) or "",
    )
    reason = _text(msg, "reason", required=False)
    if reason:
        out.reason = reason
    return pb.ClientMessage(switch_agent=out)


def _hitl_decision(msg: Mapping[str, Any]) -> pb.ClientMessage:
    out = pb.HitlDecision(
        call_id=_text(msg, "call_id", "tool_call_id") or "",
        decision=_decision(msg, {pb.DECISION_APPROVE, pb.DECISION_EDIT, pb.DECISION_REJECT}),
    )
    modified = _object_json(msg, "modified_arguments", "edited_arguments", "modified_args")
    if modified is not None:
        out.modified_arguments_json = modified
    feedback = _text(msg, "feedback", required=False)
    if feedback is not None:
        out.feedback = feedback
    return pb.ClientMessage(hitl_decision=out)


def _plan_decision(msg: Mapping[str, Any]) -> pb.ClientMessage:
    if "approval_request_id" not in msg:
        raise ProtocolError(
            "MISSING_REQUIRED_FIELD",
            "plan_decision requires 'approval_request_id' and 'decision' fields",
        )
    out = pb.PlanDecision(
        approval_request_id=_text(msg, "approval_request_id") or "",
        decision=_decision(msg, {pb.DECISION_APPROVE, pb.DECISION_REJECT, pb.DECISION_MODIFY}),
    )
    feedback = _text(msg, "feedback", required=False)
    if feedback is not None:
        out.feedback = feedback
    return pb.ClientMessage(plan_decision=out)


def _cancel(msg: Mapping[str, Any]) -> pb.ClientMessage:
    return pb.ClientMessage(cancel=pb.Cancel())


PARSERS: dict[str, Callable[[Mapping[str, Any]], pb.ClientMessage]] = {
    "user_message": _user_message,
    "tool_result": _tool_result,
    "switch_agent": _switch_agent,
    "hitl_decision": _hitl_decision,
    "hitl_response": _hitl_decision,
    "plan_decision": _plan_decision,
    "cancel": _cancel,
}


def parse_client_message(raw: Any) -> pb.ClientMessage:
    """A decoded IDE message -> ClientMessage, or ProtocolError with the spec's code."""
    if not isinstance(raw, dict):
        raise ProtocolError("INVALID_MESSAGE", "a message must be a JSON object")
    kind = raw.get("type")
    if kind is None:
        raise ProtocolError("MISSING_REQUIRED_FIELD", "a message requires 'type'")
    parser = PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ProtocolError(
            "INVALID_MESSAGE_TYPE",
            f"unknown message type {kind!r}; expected one of {sorted(PARSERS)}",
        )
    message = parser(raw)
    if raw.get("client_message_id") is not None:
        set_client_id(message, raw["client_message_id"], "'client_message_id'")
    return message


IDEMPOTENCY_HEADER = "Idempotency-Key"
CLIENT_ID_LENGTH = 200


def set_client_id(message: pb.ClientMessage, value: Any, name: str) -> None:
    """Give ``message`` the client's id (JSON field or ``Idempotency-Key`` header)."""
    if not isinstance(value, str) or not 0 < len(value) <= CLIENT_ID_LENGTH:
        raise ProtocolError(
            "MISSING_REQUIRED_FIELD", f"{name} must be a string of 1-{CLIENT_ID_LENGTH} chars"
        )
    message.client_message_id = value


def with_idempotency_key(message: pb.ClientMessage, headers: Mapping[str, str]) -> pb.ClientMessage:
    """``message`` with the request's ``Idempotency-Key`` as its client message id."""
    key = headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        set_client_id(message, key, IDEMPOTENCY_HEADER)
    return message


def json_body(raw: bytes) -> Any:
    """A request body's JSON; INVALID_MESSAGE for one that is not JSON or not UTF-8."""
    try:
        return json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError too: bytes that are not UTF-8
        raise ProtocolError("INVALID_MESSAGE", f"Invalid JSON body: {error}") from error


def parse_text(text: str) -> pb.ClientMessage:
    """A WebSocket text frame -> ClientMessage."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProtocolError("INVALID_MESSAGE", f"Invalid JSON message: {error}") from error
    return parse_client_message(raw)


def normalise_stream_body(body: Any) -> tuple[str, dict[str, Any]]:
    """POST /agent/message/stream body (seed 000 flat or seed 002 nested) -> (session, message)."""
    if not isinstance(body, dict):
        raise ProtocolError("INVALID_MESSAGE", "the body must be a JSON object")
    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise ProtocolError("MISSING_REQUIRED_FIELD", "the body requires 'session_id'")
    message = body.get("message")
    if isinstance(message, dict):
        if "client_message_id" in body and "client_message_id" not in message:
            message = {**message, "client_message_id": body["client_message_id"]}
        return session_id, message
    kind = body.get("message_type") or "user_message"
    flat: dict[str, Any] = {"type": kind}
    if kind == "user_message":
        flat["content"] = message
        flat["agent_type"] = body.get("agent_type")
    elif kind == "switch_agent":
        flat.update(content=message or "", agent_type=body.get("agent_type"))
    elif kind == "tool_result":
        flat.update(call_id=body.get("tool_call_id"), result=body.get("tool_result"))
    elif kind == "hitl_decision":
        decision = body.get("hitl_decision") or {}
        if not isinstance(decision, dict):
            raise ProtocolError("MISSING_REQUIRED_FIELD", "'hitl_decision' must be an object")
        flat.update(call_id=body.get("tool_call_id"), **decision)
    else:
        flat.update({k: v for k, v in body.items() if k not in {"session_id", "message_type"}})
    flat.setdefault("client_message_id", body.get("client_message_id"))
    return session_id, {k: v for k, v in flat.items() if v is not None}
