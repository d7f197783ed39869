"""The orchestrator's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import (
    Conflict,
    ErrorKind,
    InvalidInput,
    LimitReached,
    NotFound,
    ServiceError,
    Unavailable,
)

# ---- sessions and their limits -----------------------------------------------------------


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


class InvalidTransition(Conflict):
    """The session is not in a state from which the requested one may be reached.

    It reaches a client only when a message does not fit the session's state (e.g. a
    clarification answer while nothing was asked), hence INVALID_MESSAGE_TYPE.
    """

    code = "INVALID_MESSAGE_TYPE"


class KeyNotFound(NotFound):
    """No API key with this id."""

    code = "MISSING_REQUIRED_FIELD"


# ---- agent templates and their instances -------------------------------------------------


class InvalidTemplate(InvalidInput):
    """A template definition is malformed (missing field, bad name, value out of range)."""

    code = "MISSING_REQUIRED_FIELD"


class InvalidBudget(InvalidInput):
    """An execution_policy budget is malformed."""

    code = "MISSING_REQUIRED_FIELD"


class UnknownTool(InvalidInput):
    """A template names a tool the catalog does not have."""

    code = "TOOL_VALIDATION_ERROR"


class UnknownAgent(InvalidInput):
    """A template hands over to an agent that does not exist (a bad request, not a 404)."""

    code = "AGENT_NOT_FOUND"


class BadFileRule(InvalidInput):
    """A file restriction is not a valid regular expression."""

    code = "FILE_RESTRICTION_ERROR"


class AgentNotFound(NotFound):
    """No such agent template (or it is not served in this mode)."""

    code = "AGENT_NOT_FOUND"


class ProtectedTemplate(Conflict):
    """The entry agents cannot be deactivated: no task could start (or switch) without them."""

    code = "AGENT_SWITCH_FAILED"


class PoolExhausted(Unavailable):
    """Every instance of the template stayed busy for the whole lease timeout."""

    code = "SERVICE_UNAVAILABLE"


class CleanupFailed(ServiceError):
    """An instance could not be brought back to a clean state; it is replaced."""

    code = "INTERNAL_ERROR"
    kind = ErrorKind.INTERNAL


# ---- peers: llmproxy, hitl, toolsearch ---------------------------------------------------


class LlmFailure(ServiceError):
    """The model could not answer; ``code`` says why (LLM_TIMEOUT, LLM_ERROR, ...)."""

    code = "LLM_ERROR"
    kind = ErrorKind.UNAVAILABLE


class MeshCallFailed(ServiceError):
    """A call to another mesh service failed; ``code`` is that service's error code."""

    kind = ErrorKind.UNAVAILABLE
