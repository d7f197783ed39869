"""The person at the terminal, as the turn driver sees them: answers to approvals and questions.

The terminal implementation lives in ``terminal.py``; ``Nobody`` stands in for ``codelab -p``,
where no one can approve: what hitl flagged, and a patch put up for review, is refused,
never waved through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from clients.cli.errors import NoPerson

Event = dict[str, Any]


@dataclass(frozen=True)
class CallDecision:
    """approve | edit (with ``arguments``) | reject (with ``feedback``) for one tool call."""

    decision: Literal["approve", "edit", "reject"]
    arguments: dict[str, Any] | None = None
    feedback: str | None = None

    def message(self, call_id: str) -> dict[str, Any]:
        """The ``hitl_decision`` the gateway takes."""
        out: dict[str, Any] = {
            "type": "hitl_decision",
            "call_id": call_id,
            "decision": self.decision,
        }
        if self.arguments is not None:
            out["modified_arguments"] = self.arguments
        if self.feedback:
            out["feedback"] = self.feedback
        return out


@dataclass(frozen=True)
class PlanDecision:
    """approve | modify | reject for a proposed plan; ``feedback`` says what to change."""

    decision: Literal["approve", "modify", "reject"]
    feedback: str | None = None

    def message(self, approval_request_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "plan_decision",
            "approval_request_id": approval_request_id,
            "decision": self.decision,
        }
        if self.feedback:
            out["feedback"] = self.feedback
        return out


@dataclass(frozen=True)
class PatchReview:
    """keep (the patch as proposed) | edit (``patch``: what is kept) | reject (``feedback``)
    for an ``apply_patch_review``; nothing is written, the model applies what was kept."""

    decision: Literal["keep", "edit", "reject"]
    patch: str | None = None
    feedback: str | None = None

    def result(self, proposed: str) -> dict[str, Any]:
        """The ``tool_result`` the runtime reads as the person's review of ``proposed``."""
        if self.decision == "reject":
            return {"accepted": False, "feedback": self.feedback or "rejected in the review"}
        kept = self.patch if self.decision == "edit" and self.patch is not None else proposed
        return {"patch": kept}


class Person(Protocol):
    """Who answers what the runtime cannot decide alone."""

    async def review_call(self, call: Event, preview: str) -> CallDecision:
        """A flagged tool call, with a preview (a diff, or why a command was flagged)."""

    async def review_plan(self, request: Event, steps: list[Event]) -> PlanDecision:
        """A proposed plan (``plan_approval_required`` and its steps from ``plan_update``)."""

    async def review_patch(self, patch: str, description: str | None) -> PatchReview:
        """``apply_patch_review``: keep, edit or reject a patch (the runtime's approval)."""

    async def answer(self, question: str, options: list[str]) -> str:
        """``prompt_user``: a free answer, or one of ``options``."""


class Nobody:
    """No one at the terminal: flagged calls and plans are refused with a reason."""

    reason = "codelab ran without a person (-p): nobody could approve this"

    async def review_call(self, call: Event, preview: str) -> CallDecision:
        return CallDecision("reject", feedback=self.reason)

    async def review_plan(self, request: Event, steps: list[Event]) -> PlanDecision:
        return PlanDecision("reject", feedback=self.reason)

    async def review_patch(self, patch: str, description: str | None) -> PatchReview:
        return PatchReview("reject", feedback=self.reason)

    async def answer(self, question: str, options: list[str]) -> str:
        raise NoPerson(f"nobody is at the terminal to answer {question!r}")
