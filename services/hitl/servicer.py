"""Hitl gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import json
from typing import Any

from grpc import aio

from codelab.v1 import hitl_pb2 as pb
from codelab.v1 import hitl_pb2_grpc as pb_grpc
from services.common.errors import InvalidInput
from services.hitl.policy import evaluate

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


class HitlServicer(pb_grpc.HitlServicer):
    """Answers whether a tool call needs a human's approval."""

    async def Evaluate(
        self, request: pb.EvaluateRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EvaluateResponse:
        if not request.tool_name:
            raise InvalidInput("tool_name is required")
        decision = evaluate(request.tool_name, parse_arguments(request.arguments_json))
        return pb.EvaluateResponse(
            requires_approval=decision.requires_approval,
            reason=decision.reason or "",
            risk=decision.risk,
        )
