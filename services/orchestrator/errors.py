"""The orchestrator's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import ErrorKind, InvalidInput, NotFound, ServiceError


class SessionNotFound(NotFound):
    """No such session, or it belongs to another user."""

    code = "SESSION_NOT_FOUND"


class SessionCreationFailed(ServiceError):
    """The session could not be created."""

    code = "SESSION_CREATION_FAILED"
    kind = ErrorKind.INTERNAL


class MissingField(InvalidInput):
    """A required field is absent."""

    code = "MISSING_REQUIRED_FIELD"


class InvalidMessageType(InvalidInput):
    """The client sent a message type the runtime does not know."""

    code = "INVALID_MESSAGE_TYPE"
