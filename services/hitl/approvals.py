"""Pending approvals and human decisions: the rules, over ``ApprovalStore``.

The store makes each transition atomic (a guarded UPDATE that also writes the audit
row); this module decides which transition to attempt and explains a refusal. No grpc.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal, cast

from services.common.errors import InvalidInput
from services.hitl.errors import (
    AlreadyDecided,
    ApprovalExpired,
    CallIdTaken,
    InvalidDecision,
    PendingApprovalNotFound,
)
from services.hitl.store import ApprovalRow, ApprovalStore, AuditRow, NewApproval, NewAudit

DecisionKind = Literal["approve", "edit", "reject"]

STATUS_BY_DECISION: dict[DecisionKind, str] = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
}
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(frozen=True)
class DecisionRequest:
    """A human's answer to one pending approval."""

    session_id: str
    call_id: str
    decision: str
    """approve | edit | reject; anything else is INVALID_DECISION."""
    modified_arguments_json: str | None = None
    """Required for edit: the arguments to run instead, a JSON object."""
    feedback: str | None = None
    user_id: str = ""


@dataclass(frozen=True)
class DecisionOutcome:
    """What the decided call should do next."""

    approval: ApprovalRow
    decision: DecisionKind
    final_arguments: dict[str, Any] | None
    """Original (approve), edited (edit) or None (reject)."""
    feedback: str | None
    duplicate: bool
    """True when this decision had already been applied (a retried delivery)."""


def validate_decision(
    decision: str, modified_arguments_json: str | None
) -> tuple[DecisionKind, dict[str, Any] | None]:
    """The decision kind and, for edit, the parsed replacement arguments."""
    if decision not in STATUS_BY_DECISION:
        raise InvalidDecision(f"decision must be approve, edit or reject, got {decision!r}")
    kind: DecisionKind = decision
    if kind != "edit":
        return kind, None  # arguments sent with approve/reject are ignored, not stored
    if modified_arguments_json is None:
        raise InvalidDecision("edit requires modified_arguments_json")
    try:
        modified = json.loads(modified_arguments_json)
    except json.JSONDecodeError as error:
        raise InvalidDecision(f"modified_arguments_json is not JSON: {error}") from error
    if not isinstance(modified, dict):
        raise InvalidDecision("modified_arguments_json must be a JSON object")
    return kind, modified


def final_arguments(row: ApprovalRow) -> dict[str, Any] | None:
    """The arguments a decided call runs with; None when it must not run."""
    if row.decision == "approve":
        return row.arguments
    if row.decision == "edit":
        return row.modified_arguments
    return None


def list_limit(limit: int, default: int = DEFAULT_LIMIT) -> int:
    """0 means the default; larger requests are capped rather than refused."""
    if limit < 0:
        raise InvalidInput(f"limit must not be negative, got {limit}")
    return min(limit or default, MAX_LIMIT)


def _require(**fields: str) -> None:
    for name, value in fields.items():
        if not value:
            raise InvalidInput(f"{name} is required")


def _outcome(row: ApprovalRow, *, duplicate: bool) -> DecisionOutcome:
    return DecisionOutcome(
        approval=row,
        decision=cast(DecisionKind, row.decision),
        final_arguments=final_arguments(row),
        feedback=row.feedback,
        duplicate=duplicate,
    )


class Approvals:
    """Creates approvals, applies decisions, expires the overdue, keeps the audit log."""

    def __init__(self, store: ApprovalStore, default_timeout: float) -> None:
        self.store = store
        self.default_timeout = default_timeout

    async def create(self, new: NewApproval) -> ApprovalRow:
        """Record a pending call; the same call created again returns the stored row."""
        _require(call_id=new.call_id, session_id=new.session_id, tool_name=new.tool_name)
        if new.timeout_seconds < 0:
            raise InvalidInput(f"timeout_seconds must not be negative, got {new.timeout_seconds}")
        if not new.timeout_seconds:
            new = dataclasses.replace(new, timeout_seconds=self.default_timeout)
        created = await self.store.insert(new)
        if created is not None:
            return created
        existing = await self.store.get(new.call_id)
        if existing is None:  # deleted in between: there is no delete, so a bug
            raise PendingApprovalNotFound(f"Pending approval vanished: {new.call_id}")
        if existing.session_id != new.session_id:
            raise CallIdTaken(f"call_id {new.call_id} belongs to another session")
        if (existing.tool_name, existing.arguments) != (new.tool_name, new.arguments):
            raise CallIdTaken(f"call_id {new.call_id} was created with other content")
        return existing

    async def decide(self, request: DecisionRequest) -> DecisionOutcome:
        """Apply approve / edit / reject to a pending approval (idempotent for retries)."""
        kind, modified = validate_decision(request.decision, request.modified_arguments_json)
        _require(session_id=request.session_id, call_id=request.call_id)
        # Terminates: each pass either returns/raises or saw the row move on (pending ->
        # terminal, or absent -> pending), and a row moves at most twice.
        while True:
            decided = await self.store.apply_decision(
                request.session_id,
                request.call_id,
                status=STATUS_BY_DECISION[kind],
                decision=kind,
                modified_arguments=modified,
                feedback=request.feedback,
                user_id=request.user_id,
            )
            if decided is not None:
                return _outcome(decided, duplicate=False)
            current = await self.store.get(request.call_id)
            if current is None or current.session_id != request.session_id:
                # Another session's call is reported as missing: ids must not be probed.
                raise PendingApprovalNotFound(f"Pending approval not found: {request.call_id}")
            if current.status == "pending":
                # Still pending yet not decided: it is overdue (or was created just now).
                if await self.store.expire(request.call_id) is not None:
                    raise ApprovalExpired(f"Approval {request.call_id} expired")
                continue
            return self._settled(current, kind, modified)

    def _settled(
        self, current: ApprovalRow, kind: DecisionKind, modified: dict[str, Any] | None
    ) -> DecisionOutcome:
        """The answer for an approval that is no longer pending."""
        if current.status == "expired":
            raise ApprovalExpired(f"Approval {current.call_id} expired")
        same_edit = kind != "edit" or current.modified_arguments == modified
        if current.decision != kind or not same_edit:
            raise AlreadyDecided(f"Approval {current.call_id} was already {current.status}")
        return _outcome(current, duplicate=True)

    async def list_pending(self, session_id: str) -> list[ApprovalRow]:
        """The session's approvals still waiting (and not overdue), oldest first."""
        _require(session_id=session_id)
        return await self.store.list_pending(session_id)

    async def expire_due(self, limit: int = 0) -> list[ApprovalRow]:
        """Expire overdue approvals; each is returned by exactly one call, ever."""
        return await self.store.expire_due(list_limit(limit))

    async def record_audit(self, entry: NewAudit) -> AuditRow:
        _require(session_id=entry.session_id, decision=entry.decision, event_type=entry.event_type)
        return await self.store.record_audit(entry)

    async def list_audit(
        self, session_id: str = "", event_type: str = "", limit: int = 0
    ) -> list[AuditRow]:
        """Newest first; empty filters match everything."""
        return await self.store.list_audit(session_id, event_type, list_limit(limit))
