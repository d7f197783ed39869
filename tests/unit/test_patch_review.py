"""Reading the IDE's answer to a patch review."""

from __future__ import annotations

import json

import pytest

from services.orchestrator.turn.patch_review import Review, review_outcome, reviewed

PATCH = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize(
    ("answer", "error", "expected"),
    [
        (json.dumps(PATCH), None, Review("approve", PATCH)),
        (json.dumps({"patch": PATCH + "\n"}), None, Review("approve", PATCH + "\n")),
        (json.dumps({"filtered_diff": "--- a/x\n"}), None, Review("edit", "--- a/x\n")),
        (json.dumps({"applied": True}), None, Review("approve", PATCH)),
        (None, None, Review("approve", PATCH)),
        (json.dumps({"patch": "  "}), None, Review("reject", None)),
        (
            json.dumps({"status": "Rejected", "reason": "later"}),
            None,
            Review("reject", None, "later"),
        ),
        (json.dumps({"accepted": False}), None, Review("reject", None)),
        ("not json", None, Review("edit", "not json")),
        (None, "review window closed", Review("reject", None, "review window closed")),
    ],
)
def test_review_outcomes(answer: str | None, error: str | None, expected: Review) -> None:
    assert review_outcome(PATCH, answer, error) == expected


def test_reviewed_ignores_surrounding_whitespace_only() -> None:
    assert reviewed(PATCH + "\n\n", [PATCH])
    assert not reviewed(PATCH.replace("+b", "+c"), [PATCH]) and not reviewed(PATCH, [])
