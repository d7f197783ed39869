"""hitl's pure rules: decision validation, final arguments, limits, template policy."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from codelab.v1 import hitl_pb2
from services.common.errors import ErrorKind, InvalidInput
from services.hitl.approvals import final_arguments, list_limit, validate_decision
from services.hitl.errors import InvalidDecision
from services.hitl.policy import DEFAULT_POLICY
from services.hitl.servicer import policy_from_proto
from services.hitl.store import ApprovalRow

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
ROW = ApprovalRow(
    call_id="c",
    session_id="s",
    tool_name="write_file",
    arguments={"path": "a.py"},
    reason="",
    risk="medium",
    agent="",
    plan_id=None,
    step_id=None,
    status="pending",
    timeout_seconds=300.0,
    created_at=NOW,
    expires_at=NOW + dt.timedelta(seconds=300),
    decided_at=None,
    decision=None,
    modified_arguments=None,
    feedback=None,
    user_id="",
)


def test_approve_and_reject_ignore_modified_arguments() -> None:
    assert validate_decision("approve", '{"x": 1}') == ("approve", None)
    assert validate_decision("reject", None) == ("reject", None)


def test_edit_parses_its_arguments() -> None:
    assert validate_decision("edit", '{"path": "b.py"}') == ("edit", {"path": "b.py"})


@pytest.mark.parametrize(
    ("decision", "modified"),
    [("edit", None), ("edit", "[1]"), ("edit", "{"), ("modify", None), ("unspecified", None)],
)
def test_malformed_decisions_are_invalid_input(decision: str, modified: str | None) -> None:
    with pytest.raises(InvalidDecision) as caught:
        validate_decision(decision, modified)
    assert (caught.value.code, caught.value.kind) == ("INVALID_DECISION", ErrorKind.INVALID)


@pytest.mark.parametrize(
    ("decision", "modified", "expected"),
    [
        ("approve", None, {"path": "a.py"}),
        ("edit", {"path": "b.py"}, {"path": "b.py"}),
        ("reject", None, None),
    ],
)
def test_final_arguments_follow_the_decision(
    decision: str, modified: dict[str, Any] | None, expected: dict[str, Any] | None
) -> None:
    row = dataclasses.replace(ROW, decision=decision, modified_arguments=modified)
    assert final_arguments(row) == expected


def test_list_limit_defaults_caps_and_refuses_negative() -> None:
    assert (list_limit(0), list_limit(5), list_limit(50_000)) == (100, 5, 1000)
    with pytest.raises(InvalidInput):
        list_limit(-1)


def test_template_policy_replaces_only_the_lists_it_sets() -> None:
    assert policy_from_proto(hitl_pb2.HitlPolicy()) == DEFAULT_POLICY
    policy = policy_from_proto(
        hitl_pb2.HitlPolicy(never_approve=["write_file"], command_deny=["git push*"])
    )
    assert policy == dataclasses.replace(
        DEFAULT_POLICY, never_approve=frozenset({"write_file"}), command_deny=("git push*",)
    )
