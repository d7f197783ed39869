"""The orchestrator's side of toolsearch and hitl: plain Python over their stubs.

gRPC failures become ServiceError with the code the service put in its trailing
metadata, so the agent loop never sees grpc.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from codelab.v1 import common_pb2, hitl_pb2, hitl_pb2_grpc, toolsearch_pb2, toolsearch_pb2_grpc
from services.common.channels import error_code
from services.common.errors import ErrorKind
from services.orchestrator.errors import MeshCallFailed
from services.orchestrator.turn.toolbox import CatalogRow, ToolSpec, catalog_from_json

T = TypeVar("T")

_KIND_BY_STATUS = {
    grpc.StatusCode.NOT_FOUND: ErrorKind.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: ErrorKind.INVALID,
    grpc.StatusCode.FAILED_PRECONDITION: ErrorKind.CONFLICT,
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorKind.TIMEOUT,
}


RESTART_ATTEMPTS = 6


async def call(request: Callable[[], Awaitable[T]]) -> T:
    """Run a unary call; while the service restarts (UNAVAILABLE) retry for a few seconds."""
    for attempt in range(RESTART_ATTEMPTS):
        try:
            return await request()
        except grpc.aio.AioRpcError as error:
            restarting = error.code() == grpc.StatusCode.UNAVAILABLE and error_code(error) is None
            if restarting and attempt < RESTART_ATTEMPTS - 1:
                await asyncio.sleep(min(0.2 * 2**attempt, 2.0))
                continue
            raise _failure(error) from error
    raise AssertionError("unreachable")


def _failure(error: grpc.aio.AioRpcError) -> MeshCallFailed:
    failure = MeshCallFailed(
        error.details() or error.code().name, code=error_code(error) or "SERVICE_UNAVAILABLE"
    )
    failure.kind = _KIND_BY_STATUS.get(error.code(), ErrorKind.UNAVAILABLE)
    return failure


@dataclass(frozen=True)
class Verdict:
    """hitl's answer for one call."""

    requires_approval: bool
    reason: str
    risk: str


@dataclass(frozen=True)
class Decided:
    """A human decision as hitl recorded it."""

    decision: str
    """approve | edit | reject"""
    arguments: dict[str, Any]
    feedback: str | None
    duplicate: bool


@dataclass(frozen=True)
class Expired:
    call_id: str
    session_id: str
    timeout_seconds: int


_DECISIONS = {
    common_pb2.DECISION_APPROVE: "approve",
    common_pb2.DECISION_EDIT: "edit",
    common_pb2.DECISION_REJECT: "reject",
}


class HitlClient:
    """Policy, approvals and audit through the hitl service."""

    def __init__(self, stub: hitl_pb2_grpc.HitlAsyncStub) -> None:
        self.stub = stub

    async def evaluate(
        self,
        session_id: str,
        agent: str,
        tool: str,
        arguments: Mapping[str, Any],
        policy: Mapping[str, Sequence[str]],
        tool_risk: str = "",
    ) -> Verdict:
        request = hitl_pb2.EvaluateRequest(
            session_id=session_id,
            agent=agent,
            tool_name=tool,
            arguments_json=json.dumps(arguments),
            tool_risk=tool_risk,
        )
        if policy:
            request.policy.CopyFrom(hitl_pb2.HitlPolicy(**{k: list(v) for k, v in policy.items()}))
        reply = await call(lambda: self.stub.Evaluate(request))
        return Verdict(reply.requires_approval, reply.reason, reply.risk)

    async def create_approval(
        self,
        session_id: str,
        call_id: str,
        agent: str,
        tool: str,
        arguments: Mapping[str, Any],
        verdict: Verdict,
        plan_id: str | None,
        step_id: str | None,
        timeout_seconds: int | None = None,
    ) -> None:
        await call(
            lambda: self.stub.CreateApproval(
                hitl_pb2.CreateApprovalRequest(
                    session_id=session_id,
                    call_id=call_id,
                    agent=agent,
                    tool_name=tool,
                    arguments_json=json.dumps(arguments),
                    reason=verdict.reason,
                    risk=verdict.risk,
                    plan_id=plan_id,
                    step_id=step_id,
                    timeout_seconds=timeout_seconds or 0,
                )
            )
        )

    async def decide(
        self,
        session_id: str,
        call_id: str,
        decision: common_pb2.Decision.ValueType,
        modified: Mapping[str, Any] | None,
        feedback: str | None,
        user_id: str,
    ) -> Decided:
        request = hitl_pb2.DecideRequest(
            session_id=session_id, call_id=call_id, decision=decision, user_id=user_id
        )
        if modified is not None:
            request.modified_arguments_json = json.dumps(modified)
        if feedback is not None:
            request.feedback = feedback
        reply = await call(lambda: self.stub.Decide(request))
        return Decided(
            decision=_DECISIONS.get(reply.decision, "reject"),
            arguments=json.loads(reply.final_arguments_json or "{}"),
            feedback=reply.feedback if reply.HasField("feedback") else None,
            duplicate=reply.duplicate,
        )

    async def pending(self, session_id: str) -> list[hitl_pb2.Approval]:
        reply = await call(
            lambda: self.stub.ListPending(hitl_pb2.ListPendingRequest(session_id=session_id))
        )
        return list(reply.approvals)

    async def expire_due(self) -> list[Expired]:
        reply = await call(lambda: self.stub.ExpireDue(hitl_pb2.ExpireDueRequest(limit=100)))
        return [Expired(a.call_id, a.session_id, a.timeout_seconds) for a in reply.expired]

    async def audit(
        self,
        session_id: str,
        event_type: str,
        decision: str,
        user_id: str,
        call_id: str = "",
        feedback: str | None = None,
        details: Mapping[str, Any] | None = None,
        tool_name: str = "",
        original: Mapping[str, Any] | None = None,
        modified: Mapping[str, Any] | None = None,
    ) -> None:
        entry = hitl_pb2.AuditEntry(
            session_id=session_id,
            event_type=event_type,
            decision=decision,
            user_id=user_id,
            call_id=call_id,
            feedback=feedback,
            tool_name=tool_name,
        )
        if details:
            entry.details_json = json.dumps(details)
        if original is not None:
            entry.original_arguments_json = json.dumps(original)
        if modified is not None:
            entry.modified_arguments_json = json.dumps(modified)
        await call(lambda: self.stub.RecordAudit(entry))


async def load_catalog(
    stub: toolsearch_pb2_grpc.ToolSearchAsyncStub, known: dict[CatalogRow, ToolSpec]
) -> list[ToolSpec]:
    """The whole catalog; ``known`` holds the specs of the last load (see catalog_from_json)."""
    reply = await call(lambda: stub.ListTools(toolsearch_pb2.ListToolsRequest()))
    return await catalog_from_json(
        [
            (
                t.name,
                t.description,
                t.parameters_json,
                t.executor,
                t.timeout_seconds,
                t.risk,
                t.remote_endpoint,
            )
            for t in reply.tools
        ],
        known,
    )


def catalog_version(stub: toolsearch_pb2_grpc.ToolSearchAsyncStub) -> Callable[[], Awaitable[int]]:
    """The catalog's version (it moves with every change of a tool)."""

    async def version() -> int:
        reply = await call(lambda: stub.IndexStats(toolsearch_pb2.IndexStatsRequest()))
        return int(reply.catalog_version)

    return version


def tool_searcher(stub: toolsearch_pb2_grpc.ToolSearchAsyncStub) -> Any:
    """A Toolbox.search over the toolsearch service (hybrid retrieval)."""

    async def search(
        query: str,
        allowed: Sequence[str],
        required: Sequence[str],
        max_tools: int,
        session_id: str,
        template: str,
    ) -> list[str]:
        request = toolsearch_pb2.SearchToolsRequest(
            query=query,
            top_k=max_tools or 8,
            allowed=list(allowed),
            required=list(required),
            max_tools=max_tools,
            session_id=session_id,
            template=template,
        )
        reply = await call(lambda: stub.SearchTools(request))
        return [r.tool.name for r in reply.results]

    return search
