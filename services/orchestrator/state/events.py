"""Constructors for the events the runtime sends; the IDE's JSON is made in the gateway."""

from __future__ import annotations

import json
import uuid
from typing import Any

from codelab.v1 import common_pb2 as pb
from services.orchestrator.metrics import ERRORS

SUMMARY_CHARS = 2000


def new_id(prefix: str) -> str:
    """A fresh id such as ``call_…`` or ``msg_…`` (the runtime's own, never the model's)."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def kind(event: pb.ServerEvent) -> str:
    """The event's type name, e.g. ``assistant_message``."""
    return event.WhichOneof("event") or ""


def assistant_final(agent: str, message_id: str) -> pb.ServerEvent:
    """Closes an answer whose tokens were streamed (seed 001: no token, is_final true)."""
    return pb.ServerEvent(
        assistant_message=pb.AssistantMessage(is_final=True, agent=agent, message_id=message_id)
    )


def context_compacted(messages: int, before: int, after: int) -> pb.ServerEvent:
    return pb.ServerEvent(
        context_compacted=pb.ContextCompacted(
            messages=messages, tokens_before=before, tokens_after=after
        )
    )


def done(status: str = "completed") -> pb.ServerEvent:
    return pb.ServerEvent(done=pb.Done(is_final=True, status=status))


def duplicate(client_message_id: str, first_seq: int) -> pb.ServerEvent:
    """A repeated client message: applied once already; its events start at ``first_seq``."""
    return pb.ServerEvent(
        done=pb.Done(
            is_final=True,
            status="duplicate",
            client_message_id=client_message_id,
            first_seq=first_seq,
        )
    )


def refused(code: str, content: str, client_message_id: str | None) -> pb.ServerEvent:
    """A client message that could not be accepted (its id echoed when it had one)."""
    event = error(code, content)
    if client_message_id:
        event.error.client_message_id = client_message_id
    return event


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
    ERRORS.labels(code).inc()
    event = pb.ErrorEvent(content=content, error_code=pb.ErrorCode.Value(code))
    if details:
        event.details_json = json.dumps(details, default=str)
    if call_id or plan_id or step_id:
        event.context.CopyFrom(pb.ErrorContext(call_id=call_id, plan_id=plan_id, step_id=step_id))
    return pb.ServerEvent(error=event)


def assistant_content(content: str, agent: str, message_id: str) -> pb.ServerEvent:
    """A whole assistant message (attempt_completion's result, a follow-up question)."""
    return pb.ServerEvent(
        assistant_message=pb.AssistantMessage(
            content=content, is_final=True, agent=agent, message_id=message_id
        )
    )


def tool_call(
    call_id: str,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    requires_approval: bool,
    reason: str | None,
    agent: str,
    plan_id: str | None = None,
    step_id: str | None = None,
) -> pb.ServerEvent:
    return pb.ServerEvent(
        tool_call=pb.ToolCall(
            call_id=call_id,
            tool_name=tool_name,
            arguments_json=json.dumps(arguments),
            requires_approval=requires_approval,
            reason=reason,
            agent=agent,
            plan_id=plan_id,
            step_id=step_id,
        )
    )


def agent_switched(
    from_agent: str, to_agent: str, reason: str, confidence: str | None = None
) -> pb.ServerEvent:
    return pb.ServerEvent(
        agent_switched=pb.AgentSwitched(
            content=f"Switched to {to_agent} agent",
            from_agent=from_agent,
            to_agent=to_agent,
            reason=reason,
            confidence=confidence,
        )
    )


def plan_approval_required(
    plan_id: str, request_id: str, goal: str, subtasks: int, estimate: str
) -> pb.ServerEvent:
    return pb.ServerEvent(
        plan_approval_required=pb.PlanApprovalRequired(
            content="Plan requires your approval",
            approval_request_id=request_id,
            plan_id=plan_id,
            plan_summary=pb.PlanSummary(
                goal=goal, subtasks_count=subtasks, total_estimated_time=estimate
            ),
        )
    )


def plan_update(plan_id: str, steps: list[dict[str, Any]], current_step: str) -> pb.ServerEvent:
    return pb.ServerEvent(
        plan_update=pb.PlanUpdate(
            plan_id=plan_id,
            current_step=current_step,
            steps=[
                pb.PlanStep(id=s["id"], desc=s["desc"], status=s["status"], agent=s.get("agent"))
                for s in steps
            ],
        )
    )


def plan_progress(plan_id: str, step_id: str, result: str, status: str) -> pb.ServerEvent:
    return pb.ServerEvent(
        plan_progress=pb.PlanProgress(
            plan_id=plan_id, step_id=step_id, result=result, status=status
        )
    )


def plan_rejected(plan_id: str, request_id: str, feedback: str | None) -> pb.ServerEvent:
    return pb.ServerEvent(
        plan_rejected=pb.PlanRejected(
            content="Plan rejected",
            plan_id=plan_id,
            approval_request_id=request_id,
            feedback=feedback,
        )
    )


def agent_chain_update(
    chain_id: str, agents: list[tuple[str, str, str]], current_agent: str
) -> pb.ServerEvent:
    """``agents``: (agent_id, role, status) in chain order."""
    return pb.ServerEvent(
        agent_chain_update=pb.AgentChainUpdate(
            chain_id=chain_id,
            current_agent=current_agent,
            agents=[pb.ChainAgent(agent_id=a, role=r, status=s) for a, r, s in agents],
        )
    )


def execution_completed(
    kind: str,
    execution_id: str,
    status: str,
    summary: str,
    *,
    plan_id: str | None = None,
    agent: str | None = None,
) -> pb.ServerEvent:
    """A plan (``kind`` plan) or a delegated chain (delegation) finished."""
    return pb.ServerEvent(
        execution_completed=pb.ExecutionCompleted(
            kind=kind,
            execution_id=execution_id,
            status=status,
            summary=summary[:SUMMARY_CHARS],
            plan_id=plan_id,
            agent=agent,
        )
    )


def plan_modification_requested(
    plan_id: str, request_id: str, planner: str, feedback: str | None
) -> pb.ServerEvent:
    return pb.ServerEvent(
        plan_modification_requested=pb.PlanModificationRequested(
            content=f"Plan modification requested; {planner} revises the plan",
            plan_id=plan_id,
            approval_request_id=request_id,
            feedback=feedback,
            planner=planner,
        )
    )


def call_status(
    call_id: str,
    status: str,
    tool_name: str,
    *,
    plan_id: str | None = None,
    step_id: str | None = None,
    feedback: str | None = None,
) -> pb.ServerEvent:
    """A call's HITL status: waiting_human | approved | rejected | edited_by_human."""
    return pb.ServerEvent(
        status=pb.CallStatus(
            call_id=call_id,
            status=status,
            tool_name=tool_name,
            plan_id=plan_id,
            step_id=step_id,
            feedback=feedback,
        )
    )
