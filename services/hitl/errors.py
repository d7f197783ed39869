"""hitl's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import Conflict, InvalidInput, NotFound


class PendingApprovalNotFound(NotFound):
    """No approval with this call_id, or it belongs to another session."""

    code = "PENDING_APPROVAL_NOT_FOUND"


class ApprovalExpired(Conflict):
    """The approval timed out before a human decided."""

    code = "HITL_TIMEOUT"


class InvalidDecision(InvalidInput):
    """The decision is malformed (unknown kind, edit without an arguments object)."""

    code = "INVALID_DECISION"


class AlreadyDecided(Conflict):
    """A different decision was already applied to this approval."""

    code = "INVALID_DECISION"


class CallIdTaken(InvalidInput):
    """The call_id already names a different pending call (another session or content)."""

    code = "TOOL_VALIDATION_ERROR"


class CommandParseError(ValueError):
    """The command line is malformed (unbalanced quotes, unterminated substitution, ...)."""
