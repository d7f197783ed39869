"""The orchestrator's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import InvalidInput, NotFound


class SessionNotFound(NotFound):
    """No such session, or it belongs to another user."""

    code = "SESSION_NOT_FOUND"


class MissingField(InvalidInput):
    """A required field is absent."""

    code = "MISSING_REQUIRED_FIELD"
