"""The gateway's failures under one root, and the one map from a failure to HTTP and WebSocket.

A failure reaches the IDE in one of three shapes: a failed mesh call (a gRPC status, with
the service's spec error code in its trailing metadata), a turn's error event (a spec code
alone) or a request the gateway refuses itself (a ``GatewayError``). Each is first a kind
of failure (``ErrorKind``, as in every service's exception tree): a mesh call by its
status, an event by its code (``KIND_OF_CODE``), a refusal by its class. ``TRANSPORT``
then gives the kind's HTTP status and WebSocket close code: the gateway's only such table.

A code alone does not fix its kind everywhere: AGENT_NOT_FOUND is a bad request when a
template names an unknown agent and a 404 when the agent asked for does not exist, so a
mesh call keeps the kind its service chose and ``KIND_OF_CODE`` serves what has no status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from fastapi.responses import JSONResponse

from services.common.errors import ErrorKind
from services.common.interceptors import STATUS_BY_KIND

# RFC 6455 close codes: 1008 a policy refused the socket (no key, a foreign origin); 1013
# try again later (the mesh refused or lost the stream; seed 002 reconnects after it).
WS_CLOSE_POLICY = 1008
WS_CLOSE_RETRY = 1013


@dataclass(frozen=True)
class Transport:
    """How a kind of failure reaches the IDE."""

    http: int
    """The HTTP status of a request that ends in it."""
    ws_close: int
    """The close code of a WebSocket it ends."""


TRANSPORT: dict[ErrorKind, Transport] = {
    ErrorKind.INVALID: Transport(400, WS_CLOSE_RETRY),
    ErrorKind.NOT_FOUND: Transport(404, WS_CLOSE_RETRY),
    ErrorKind.CONFLICT: Transport(409, WS_CLOSE_RETRY),
    ErrorKind.UNAUTHENTICATED: Transport(401, WS_CLOSE_POLICY),
    ErrorKind.PERMISSION: Transport(403, WS_CLOSE_POLICY),
    ErrorKind.TIMEOUT: Transport(504, WS_CLOSE_RETRY),
    ErrorKind.UNAVAILABLE: Transport(503, WS_CLOSE_RETRY),
    ErrorKind.ABORTED: Transport(409, WS_CLOSE_RETRY),
    ErrorKind.EXHAUSTED: Transport(429, WS_CLOSE_RETRY),
    # The gateway fronts the mesh: a failure inside it is a bad gateway to the IDE.
    ErrorKind.INTERNAL: Transport(502, WS_CLOSE_RETRY),
}

_INVALID = (
    "INVALID_MESSAGE_TYPE", "MISSING_REQUIRED_FIELD", "INVALID_MESSAGE", "TOOL_VALIDATION_ERROR",
    "FILE_RESTRICTION_ERROR", "INVALID_DECISION", "PENDING_APPROVAL_NOT_FOUND",
    "TOOL_CALL_NOT_FOUND", "AGENT_NOT_FOUND", "HITL_TIMEOUT", "CANCELLED",
    "LLM_CONTEXT_LENGTH_EXCEEDED",
)  # fmt: skip
_INTERNAL = (
    "ERROR_CODE_UNSPECIFIED", "SESSION_CREATION_FAILED", "AGENT_SWITCH_FAILED",
    "CLASSIFICATION_FAILED", "LLM_ERROR", "LLM_STREAM_INTERRUPTED", "DB_WRITE_ERROR",
    "DB_READ_ERROR", "INTERNAL_ERROR", "GATEWAY_UNREACHABLE", "TOOL_TIMEOUT",
)  # fmt: skip
KIND_OF_CODE: dict[str, ErrorKind] = {
    **dict.fromkeys(_INVALID, ErrorKind.INVALID),
    **dict.fromkeys(_INTERNAL, ErrorKind.INTERNAL),
    "SESSION_NOT_FOUND": ErrorKind.NOT_FOUND,
    "TURN_IN_PROGRESS": ErrorKind.CONFLICT,
    "UNAUTHORIZED": ErrorKind.UNAUTHENTICATED,
    "LLM_TIMEOUT": ErrorKind.TIMEOUT,
    "LLM_PROXY_UNAVAILABLE": ErrorKind.UNAVAILABLE,
    "SERVICE_UNAVAILABLE": ErrorKind.UNAVAILABLE,
    "DB_CONNECTION_ERROR": ErrorKind.UNAVAILABLE,
    "RATE_LIMITED": ErrorKind.EXHAUSTED,
    "BUDGET_EXCEEDED": ErrorKind.EXHAUSTED,
}
"""The kind a spec error code names when it comes without a gRPC status (a turn's error
event): the client's mistakes are INVALID (400), the mesh's own failures INTERNAL (502)."""

# The services' interceptor maps kinds to statuses; the gateway reads them back.
_KIND_OF_STATUS = {status: kind for kind, status in STATUS_BY_KIND.items()}
_KIND_OF_STATUS[grpc.StatusCode.ALREADY_EXISTS] = ErrorKind.CONFLICT


def kind_of_status(status: grpc.StatusCode) -> ErrorKind:
    """The kind of a failed mesh call (INTERNAL for statuses no service sends)."""
    return _KIND_OF_STATUS.get(status, ErrorKind.INTERNAL)


def kind_of_code(code: str) -> ErrorKind:
    """The kind of an error event's code (INTERNAL for a code the gateway does not know)."""
    return KIND_OF_CODE.get(code, ErrorKind.INTERNAL)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gateway's error JSON (REST and admin routes; the stream's error event is alike)."""
    return {"type": "error", "error_code": code, "content": message, "details": details or {}}


class GatewayError(Exception):
    """A request the gateway answers itself; ``code`` is a spec error code."""

    code: str = "INTERNAL_ERROR"
    kind: ErrorKind = ErrorKind.INVALID

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = TRANSPORT[self.kind].http if status is None else status
        """The HTTP status: the kind's, unless the refusal names its own."""

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(self.code, self.message), status_code=self.status)


class Unauthorized(GatewayError):
    """No or a wrong credential."""

    code = "UNAUTHORIZED"
    kind = ErrorKind.UNAUTHENTICATED


class Forbidden(GatewayError):
    """A valid credential without the right (admin-only figures, a foreign origin)."""

    code = "UNAUTHORIZED"
    kind = ErrorKind.PERMISSION


class ProtocolError(GatewayError):
    """A client message or body that cannot be accepted; ``code`` is a spec error code."""

    kind = ErrorKind.INVALID

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)


class AdminRefused(GatewayError):
    """An admin request the gateway answers itself (403 not an admin, 404 no such tool)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message, code=code, status=status)


class OpenAIError(GatewayError):
    """An error rendered as OpenAI's ``{"error": {message, type, param, code}}``; ``code``
    is a spec error code (OpenAI's SDKs pick the exception by the HTTP status)."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message, code=code, status=status)
        self.param = param

    @classmethod
    def of_code(cls, code: str, message: str) -> OpenAIError:
        """A failure named by a spec code alone, with that code's HTTP status."""
        return cls(TRANSPORT[kind_of_code(code)].http, message, code)

    def body(self) -> dict[str, Any]:
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)
