"""Constructors for the events the runtime sends; the IDE's JSON is made in the gateway."""

from __future__ import annotations

import json
from typing import Any

from codelab.v1 import common_pb2 as pb


def kind(event: pb.ServerEvent) -> str:
    """The event's type name, e.g. ``assistant_message``."""
    return event.WhichOneof("event") or ""


def assistant_token(token: str, agent: str, message_id: str) -> pb.ServerEvent:
    return pb.ServerEvent(
        assistant_message=pb.AssistantMessage(
            token=token, is_final=False, agent=agent, message_id=message_id
        )
    )


def assistant_final(agent: str, message_id: str) -> pb.ServerEvent:
    """Closes an answer whose tokens were streamed (seed 001: no token, is_final true)."""
    return pb.ServerEvent(
        assistant_message=pb.AssistantMessage(is_final=True, agent=agent, message_id=message_id)
    )


def done(status: str = "completed") -> pb.ServerEvent:
    return pb.ServerEvent(done=pb.Done(is_final=True, status=status))


def error(
    code: str,
    content: str,
    details: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    plan_id: str | None = None,
    step_id: str | None = None,
) -> pb.ServerEvent:
    """An error event; ``code`` is a codelab.v1.ErrorCode name."""
    event = pb.ErrorEvent(content=content, error_code=pb.ErrorCode.Value(code))
    if details:
        event.details_json = json.dumps(details, default=str)
    if call_id or plan_id or step_id:
        event.context.CopyFrom(pb.ErrorContext(call_id=call_id, plan_id=plan_id, step_id=step_id))
    return pb.ServerEvent(error=event)
