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


RETRY_AFTER_MS = 1000
"""What a client is told to wait before retrying when a mesh service is away."""


def retry_details(error: grpc.aio.AioRpcError) -> dict[str, int]:
    """``{"retry_after_ms": ...}`` when the failure is one a retry may cure, else empty."""
    unavailable = error.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
    return {"retry_after_ms": RETRY_AFTER_MS} if unavailable else {}


def describe(error: grpc.aio.AioRpcError) -> tuple[int, str, str]:
    """(HTTP status, spec error code, message) for a failed mesh call."""
    status = HTTP_BY_STATUS.get(error.code(), 502)
    code = error_code(error)
    if code is None:
        code = "SERVICE_UNAVAILABLE" if status == 503 else "INTERNAL_ERROR"
    return status, code, error.details() or error.code().name


def all_details(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """What the IDE is told besides the code: the service's details (a limit's
    ``retry_after`` seconds) and, for a service away, ``retry_after_ms``."""
    return {**error_details(error), **retry_details(error)}


def error_event(error: grpc.aio.AioRpcError, session_id: str) -> dict[str, Any]:
    """A failed stream as the IDE's error event, with its details (see ``all_details``)."""
    _, code, message = describe(error)
    return local_error(code, message, session_id, all_details(error))


def retry_headers(details: dict[str, Any]) -> dict[str, str]:
    """``Retry-After`` (whole seconds) for an error whose details say when to retry."""
    seconds = details.get("retry_after")
    if not (isinstance(seconds, int) and seconds > 0) and "retry_after_ms" in details:
        seconds = -(-int(details["retry_after_ms"]) // 1000)
    return {"Retry-After": str(seconds)} if isinstance(seconds, int) and seconds > 0 else {}
