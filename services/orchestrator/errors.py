"""The orchestrator's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import InvalidInput, LimitReached, NotFound


class SessionNotFound(NotFound):
    """No such session, or it belongs to another user."""

    code = "SESSION_NOT_FOUND"


class MissingField(InvalidInput):
    """A required field is absent."""

    code = "MISSING_REQUIRED_FIELD"


class RateLimited(LimitReached):
    """Too many messages this minute, or too many sessions open at once."""

    code = "RATE_LIMITED"


class BudgetExceeded(LimitReached):
    """A daily token or cost budget, or a turn's budget, is spent."""

    code = "BUDGET_EXCEEDED"
