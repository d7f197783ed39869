"""Hitl gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from grpc import aio

from codelab.v1 import common_pb2
from codelab.v1 import hitl_pb2 as pb
from codelab.v1 import hitl_pb2_grpc as pb_grpc
from services.common.errors import InvalidInput
from services.hitl.allow_list import AllowList
from services.hitl.approvals import Approvals, DecisionRequest
from services.hitl.policy import DEFAULT_POLICY, ApprovalPolicy, evaluate
from services.hitl.store import ApprovalRow, AuditRow, NewApproval, NewAudit

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Hitl"].full_name


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool arguments as a JSON object; anything else is invalid input."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as error:
        raise InvalidInput(f"arguments_json is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise InvalidInput("arguments_json must be a JSON object")
    return value


def parse_json(raw: str | None, field: str) -> Any:
    """Any JSON value (None when absent)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{field} is not JSON: {error}") from error


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def policy_from_proto(policy: pb.HitlPolicy) -> ApprovalPolicy:
    """The defaults, with each non-empty list of the template replacing its default."""
    overrides: dict[str, Any] = {}
    if policy.always_approve:
        overrides["always_approve"] = frozenset(policy.always_approve)
    if policy.never_approve:
        overrides["never_approve"] = frozenset(policy.never_approve)
    if policy.command_allow:
        overrides["command_allow"] = tuple(policy.command_allow)
    if policy.command_deny:
        overrides["command_deny"] = tuple(policy.command_deny)
    if policy.read_only:
        overrides["read_only"] = AllowList.of(policy.read_only)
    return dataclasses.replace(DEFAULT_POLICY, **overrides)


def approval_to_proto(row: ApprovalRow) -> pb.Approval:
    return pb.Approval(
        call_id=row.call_id,
        session_id=row.session_id,
        tool_name=row.tool_name,
        arguments_json=json.dumps(row.arguments, ensure_ascii=False),
        reason=row.reason,
        risk=row.risk,
        status=row.status,
        created_at=row.created_at.isoformat(),
        expires_at=row.expires_at.isoformat(),
        # Rounded up: a sub-second HITL_TIMEOUT must not read as 0 ("the default").
        timeout_seconds=math.ceil(row.timeout_seconds),
        agent=row.agent,
        plan_id=row.plan_id,
        step_id=row.step_id,
    )


def audit_to_proto(row: AuditRow) -> pb.AuditEntry:
    return pb.AuditEntry(
        id=row.id,
        session_id=row.session_id,
        call_id=row.call_id,
        tool_name=row.tool_name,
        original_arguments_json=_dump(row.original_arguments),
        modified_arguments_json=_dump(row.modified_arguments),
        decision=row.decision,
        feedback=row.feedback,
        user_id=row.user_id,
        event_type=row.event_type,
        created_at=row.created_at.isoformat(),
        details_json=_dump(row.details),
    )


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


class HitlServicer(pb_grpc.HitlServicer):
    """Approval policy, pending approvals, decisions and the audit log."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    async def Evaluate(
        self, request: pb.EvaluateRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EvaluateResponse:
        if not request.tool_name:
            raise InvalidInput("tool_name is required")
        policy = policy_from_proto(request.policy) if request.HasField("policy") else DEFAULT_POLICY
        decision = evaluate(
            request.tool_name,
            parse_arguments(request.arguments_json),
            policy,
            tool_risk=request.tool_risk,
        )
        return pb.EvaluateResponse(
            requires_approval=decision.requires_approval,
            reason=decision.reason or "",
            risk=decision.risk,
        )

    async def CreateApproval(
        self, request: pb.CreateApprovalRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Approval:
        row = await self.approvals.create(
            NewApproval(
                call_id=request.call_id,
                session_id=request.session_id,
                tool_name=request.tool_name,
                arguments=parse_arguments(request.arguments_json),
                timeout_seconds=float(request.timeout_seconds),
                reason=request.reason,
                risk=request.risk or "medium",
                agent=request.agent,
                plan_id=_optional(request, "plan_id"),
                step_id=_optional(request, "step_id"),
            )
        )
        return approval_to_proto(row)

    async def Decide(
        self, request: pb.DecideRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DecideResponse:
        # DECISION_APPROVE -> "approve"; MODIFY/UNSPECIFIED map to names the domain refuses.
        name = common_pb2.Decision.Name(request.decision).removeprefix("DECISION_").lower()
        outcome = await self.approvals.decide(
            DecisionRequest(
                session_id=request.session_id,
                call_id=request.call_id,
                decision=name,
                modified_arguments_json=_optional(request, "modified_arguments_json"),
                feedback=_optional(request, "feedback"),
                user_id=request.user_id,
            )
        )
        return pb.DecideResponse(
            approval=approval_to_proto(outcome.approval),
            decision=common_pb2.Decision.Value("DECISION_" + outcome.decision.upper()),
            final_arguments_json=_dump(outcome.final_arguments) or "",
            feedback=outcome.feedback,
            duplicate=outcome.duplicate,
        )

    async def ListPending(
        self, request: pb.ListPendingRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListPendingResponse:
        rows = await self.approvals.list_pending(request.session_id)
        return pb.ListPendingResponse(approvals=[approval_to_proto(r) for r in rows])

    async def ExpireDue(
        self, request: pb.ExpireDueRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ExpireDueResponse:
        rows = await self.approvals.expire_due(request.limit)
        return pb.ExpireDueResponse(expired=[approval_to_proto(r) for r in rows])

    async def RecordAudit(
        self, request: pb.AuditEntry, context: aio.ServicerContext[Any, Any]
    ) -> pb.AuditEntry:
        row = await self.approvals.record_audit(
            NewAudit(
                session_id=request.session_id,
                decision=request.decision,
                event_type=request.event_type,
                call_id=request.call_id,
                tool_name=request.tool_name,
                original_arguments=parse_json(
                    _optional(request, "original_arguments_json"), "original_arguments_json"
                ),
                modified_arguments=parse_json(
                    _optional(request, "modified_arguments_json"), "modified_arguments_json"
                ),
                feedback=_optional(request, "feedback"),
                user_id=request.user_id,
                details=parse_json(_optional(request, "details_json"), "details_json"),
            )
        )
        return audit_to_proto(row)

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListAuditResponse:
        rows = await self.approvals.list_audit(
            request.session_id, request.event_type, request.limit
        )
        return pb.ListAuditResponse(entries=[audit_to_proto(r) for r in rows])
