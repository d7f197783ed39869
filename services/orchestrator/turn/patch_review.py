"""Seed 001's patch review: the IDE shows a diff, the person keeps some hunks.

That review is the approval: ``apply_patch_review`` is not put to hitl first, and its
result is recorded in the audit log as a decision (approve: the patch as proposed;
edit: the hunks kept; reject: none kept). An ``apply_patch`` of exactly the reviewed
patch then reaches the IDE without a second question.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REVIEW_TOOL = "apply_patch_review"
PATCH_KEYS = ("patch", "filtered_diff", "diff")
REJECTED = frozenset({"rejected", "reject", "declined", "cancelled"})


@dataclass(frozen=True)
class Review:
    """What the person decided in the IDE's review."""

    decision: str
    """approve | edit | reject (the audit log's spelling)."""
    patch: str | None
    """The patch that may now be applied (None after a reject)."""
    feedback: str | None = None


def _same(one: str, other: str) -> bool:
    return one.strip() == other.strip()


def review_outcome(proposed: str, result_json: str | None, error: str | None) -> Review:
    """Read the IDE's answer to a review of ``proposed``.

    The answer may be the kept patch as a string, an object with ``patch`` (or
    ``filtered_diff`` / ``diff``), ``accepted: false`` or ``status: rejected``; an
    answer naming no patch accepts the one proposed. An IDE error is a reject.
    """
    if error:
        return Review("reject", None, error)
    try:
        answer: Any = json.loads(result_json) if result_json else None
    except ValueError:
        answer = result_json
    patch: Any = None
    if isinstance(answer, str):
        patch = answer
    elif isinstance(answer, dict):
        if answer.get("accepted") is False or str(answer.get("status", "")).lower() in REJECTED:
            feedback = answer.get("feedback") or answer.get("reason")
            return Review("reject", None, str(feedback) if feedback else None)
        patch = next((answer[k] for k in PATCH_KEYS if isinstance(answer.get(k), str)), None)
    if patch is None:
        return Review("approve", proposed)
    if not patch.strip():
        return Review("reject", None)
    return Review("approve" if _same(patch, proposed) else "edit", patch)


def reviewed(patch: str, kept: list[str]) -> bool:
    """True when ``patch`` is one the person kept in a review of this session."""
    return any(_same(patch, one) for one in kept)
