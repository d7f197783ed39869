"""The orchestrator's spans: one trace per turn, with its model calls, tool calls and
approvals as children. Decorators sit on the hook points so the domain code stays as
it is; none fires per token (see services/common/tracing.py).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span

from codelab.v1 import common_pb2 as pb
from services.common import tracing
from services.common.tracing import Attributes


def stamp(item: object) -> None:
    """Record on a client message the context it arrived in, unless it names its own:
    the turn it starts (on this replica or, relayed, on the owner) continues that trace."""
    if tracing.enabled() and isinstance(item, pb.ClientMessage) and not item.trace_context:
        tracing.inject(item.trace_context)


def _turn_parent(_runtime: Any, _sid: str, _user_id: str, item: object) -> otel_context.Context:
    if isinstance(item, pb.ClientMessage) and item.trace_context:
        return tracing.extract(item.trace_context)
    return otel_context.Context()  # an expiry found by the sweep starts a trace of its own


def _kind(item: object) -> str:
    if isinstance(item, pb.ClientMessage):
        return item.WhichOneof("message") or "empty"
    return "approval_expired"


turn = tracing.traced(
    name=lambda _runtime, _sid, _user, item: f"turn {_kind(item)}",
    attributes=lambda _runtime, sid, _user, item: {
        "codelab.session_id": sid,
        "codelab.message": _kind(item),
    },
    parent=_turn_parent,
)
"""Around ``Runtime._run_one``: the turn's root span (child of the client's request)."""


def _model_attributes(_client: Any, session_id: str, *_: Any, **options: Any) -> Attributes:
    return {
        "codelab.session_id": session_id,
        "codelab.purpose": str(options.get("purpose", "turn")),
        "codelab.tools_offered": len(options.get("tools", ())),
    }


def _model_finished(span: Span, output: object) -> None:
    reason = getattr(output, "finish_reason", None)
    if reason is not None:
        span.set_attributes(
            {
                "codelab.finish_reason": reason,
                "gen_ai.usage.input_tokens": getattr(output, "prompt_tokens", 0),
                "gen_ai.usage.output_tokens": getattr(output, "completion_tokens", 0),
            }
        )


model_call = tracing.traced_stream(
    name=lambda *_args, **_options: "model call",
    attributes=_model_attributes,
    observe=_model_finished,
)
"""Around ``LlmClient.complete``: one span per model call, never one per token."""


tool_call = tracing.traced(
    name=lambda _loop, call, _budget: f"tool {call.tool_name}",
    attributes=lambda _loop, call, _budget: {
        "codelab.session_id": call.session_id,
        "codelab.call_id": call.call_id,
        "codelab.tool": call.tool_name,
        "codelab.agent": call.agent,
    },
)
"""Around ``AgentLoop.process``: validation, policy, approval request or dispatch."""


approval_decision = tracing.traced(
    name=lambda *_: "approval decision",
    attributes=lambda _inputs, sid, _user, decision: {
        "codelab.session_id": sid,
        "codelab.call_id": decision.call_id,
        "codelab.decision": pb.Decision.Name(decision.decision),
    },
)
"""Around ``Inputs.hitl_decision``."""


approval_expired = tracing.traced(
    name=lambda *_: "approval expired",
    attributes=lambda _inputs, item: {
        "codelab.session_id": item.session_id,
        "codelab.call_id": item.call_id,
    },
)
"""Around ``Inputs.expired``."""
