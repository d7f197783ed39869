"""A failed mesh call as the IDE hears of it: HTTP status, spec code, details, close code
(the statuses are mapped by ``errors.TRANSPORT``)."""

from __future__ import annotations

from typing import Any

import grpc

from services.common.channels import error_code, error_details
from services.common.errors import ErrorKind
from services.gateway.errors import TRANSPORT, kind_of_status
from services.gateway.translate import local_error

RETRY_AFTER_MS = 1000
"""What a client is told to wait before retrying when a mesh service is away."""


def retry_details(error: grpc.aio.AioRpcError) -> dict[str, int]:
    """``{"retry_after_ms": ...}`` when the failure is one a retry may cure, else empty."""
    unavailable = error.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
    return {"retry_after_ms": RETRY_AFTER_MS} if unavailable else {}


def describe(error: grpc.aio.AioRpcError) -> tuple[int, str, str]:
    """(HTTP status, spec error code, message) for a failed mesh call."""
    kind = kind_of_status(error.code())
    code = error_code(error)
    if code is None:
        code = "SERVICE_UNAVAILABLE" if kind is ErrorKind.UNAVAILABLE else "INTERNAL_ERROR"
    return TRANSPORT[kind].http, code, error.details() or error.code().name


def close_code(error: grpc.aio.AioRpcError) -> int:
    """The WebSocket close code of a stream the failed call ends."""
    return TRANSPORT[kind_of_status(error.code())].ws_close


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
