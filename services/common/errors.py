"""The root of every service's exception tree.

A service error carries the spec's error code (a ``codelab.v1.ErrorCode`` name)
and a transport-neutral ``kind``; the gRPC interceptor maps the kind to a status
code and the gateway maps it on to HTTP and WebSocket. Domain code never imports grpc.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorKind(Enum):
    """What sort of failure, independent of transport."""

    INVALID = "invalid"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION = "permission"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    ABORTED = "aborted"
    EXHAUSTED = "exhausted"
    INTERNAL = "internal"


class ServiceError(Exception):
    """Base of all expected failures; ``code`` is a spec error code."""

    code: str = "INTERNAL_ERROR"
    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details


class InvalidInput(ServiceError):
    """The request is malformed."""

    code = "MISSING_REQUIRED_FIELD"
    kind = ErrorKind.INVALID


class NotFound(ServiceError):
    """The thing asked for does not exist (or is not yours)."""

    code = "SESSION_NOT_FOUND"
    kind = ErrorKind.NOT_FOUND


class Conflict(ServiceError):
    """The request clashes with the current state."""

    code = "TURN_IN_PROGRESS"
    kind = ErrorKind.CONFLICT


class Unavailable(ServiceError):
    """A dependency does not answer; retrying later may work."""

    code = "SERVICE_UNAVAILABLE"
    kind = ErrorKind.UNAVAILABLE


class DatabaseError(ServiceError):
    """Postgres refused or could not be reached."""

    code = "DB_CONNECTION_ERROR"
    kind = ErrorKind.UNAVAILABLE


class LimitReached(ServiceError):
    """A quota or budget is used up; ``details['retry_after']`` says when to try again."""

    code = "RATE_LIMITED"
    kind = ErrorKind.EXHAUSTED


class SettingsError(ValueError):
    """A setting is missing or malformed at start; the message names the variable."""
