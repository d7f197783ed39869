"""gRPC status -> HTTP status and WebSocket close code, in one table."""

from __future__ import annotations

from typing import Any

import grpc

from services.common.channels import error_code, error_details
from services.gateway.translate import local_error

HTTP_BY_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
}

# 1011: internal error; 1013: try again later (the mesh is unavailable).
WS_CLOSE_UNAVAILABLE = 1013
WS_CLOSE_INTERNAL = 1011
WS_CLOSE_POLICY = 1008


def describe(error: grpc.aio.AioRpcError) -> tuple[int, str, str]:
    """(HTTP status, spec error code, message) for a failed mesh call."""
    status = HTTP_BY_STATUS.get(error.code(), 502)
    code = error_code(error)
    if code is None:
        code = "SERVICE_UNAVAILABLE" if status == 503 else "INTERNAL_ERROR"
    return status, code, error.details() or error.code().name


def error_event(error: grpc.aio.AioRpcError, session_id: str) -> dict[str, Any]:
    """A failed stream as the IDE's error event, with the service's details (retry_after)."""
    _, code, message = describe(error)
    return local_error(code, message, session_id, error_details(error))


def retry_headers(details: dict[str, Any]) -> dict[str, str]:
    """``Retry-After`` for an error whose details carry ``retry_after`` seconds."""
    seconds = details.get("retry_after")
    return {"Retry-After": str(seconds)} if isinstance(seconds, int) and seconds > 0 else {}
