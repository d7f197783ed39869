"""Seed 001's patch review and prompt_user flows: the person is asked once, in the IDE."""

from __future__ import annotations

import json
from typing import Any

from tests.support.ide import ide, of, text_of
from tests.support.mesh import Mesh

PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 2\n@@ -9,1 +9,1 @@\n-b = 1\n+b = 3\n"
)
KEPT = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 2\n"


def calls(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def audit(mesh: Mesh, call_id: str) -> list[dict[str, Any]]:
    rows = await mesh.pool.fetch(
        "select decision, event_type, tool_name, original_arguments, modified_arguments,"
        " user_id from hitl.audit_log where call_id = $1",
        call_id,
    )
    return [dict(r) for r in rows]


async def test_the_ide_review_is_the_approval_and_the_kept_hunks_apply_without_asking(
    mesh: Mesh,
) -> None:
    mesh.scripted.enqueue(
        calls("apply_patch_review", {"patch": PATCH, "description": "bump a and b"}),
        calls("apply_patch", {"patch": KEPT}),
        {"text": "Applied the hunk you kept."},
    )
    async with ide(mesh, "review") as client:
        first = await client.say("bump the constants", agent_type="coder")
        (review,) = of(first, "tool_call")
        assert review["tool_name"] == "apply_patch_review"
        assert review["requires_approval"] is False  # no hitl question before the review
        assert first[-1]["status"] == "awaiting_tool_result"
        second = await client.result(review["call_id"], {"patch": KEPT})
        (apply,) = of(second, "tool_call")
        assert apply["tool_name"] == "apply_patch" and apply["requires_approval"] is False
        (status,) = of(second, "status")  # seed 004's HITL status of the reviewed call
        assert (status["call_id"], status["status"]) == (review["call_id"], "edited_by_human")
        assert apply["reason"] == "approved in the IDE's patch review"
        assert second[-1]["status"] == "awaiting_tool_result"
        third = await client.result(apply["call_id"], {"applied": True})
    assert text_of(third) == "Applied the hunk you kept."
    (entry,) = await audit(mesh, review["call_id"])
    assert (entry["decision"], entry["event_type"]) == ("edit", "patch_review")
    assert entry["tool_name"] == "apply_patch_review"
    assert entry["original_arguments"] == {"patch": PATCH}
    assert entry["modified_arguments"] == {"patch": KEPT}
    told = mesh.scripted.requests[1]["messages"][-1]
    assert told["role"] == "tool" and json.loads(told["content"])["patch"] == KEPT
    assert not await mesh.pool.fetchval("select count(*) from hitl.approvals")


async def test_a_patch_other_than_the_reviewed_one_still_needs_approval(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls("apply_patch_review", {"patch": PATCH}), calls("apply_patch", {"patch": PATCH})
    )
    async with ide(mesh, "review-other") as client:
        first = await client.say("bump", agent_type="coder")
        review = of(first, "tool_call")[0]
        second = await client.result(review["call_id"], {"patch": KEPT})
    (apply,) = of(second, "tool_call")
    assert apply["requires_approval"] is True and second[-1]["status"] == "awaiting_approval"


async def test_a_review_that_keeps_nothing_is_a_recorded_reject(mesh: Mesh) -> None:
    mesh.scripted.enqueue(calls("apply_patch_review", {"patch": PATCH}), {"text": "Dropped."})
    async with ide(mesh, "review-reject") as client:
        first = await client.say("bump", agent_type="coder")
        review = of(first, "tool_call")[0]
        second = await client.result(review["call_id"], {"accepted": False, "feedback": "not now"})
    assert text_of(second) == "Dropped."
    (entry,) = await audit(mesh, review["call_id"])
    assert entry["decision"] == "reject" and entry["modified_arguments"] is None
    told = mesh.scripted.requests[-1]["messages"][-1]
    assert "rejected the whole patch" in told["content"] and "not now" in told["content"]


async def test_prompt_user_goes_to_the_ide_and_its_answer_reaches_the_model(mesh: Mesh) -> None:
    question = {"question": "Overwrite config.yaml?", "options": ["yes", "no"]}
    mesh.scripted.enqueue(calls("prompt_user", question), {"text": "Keeping it."})
    async with ide(mesh, "prompt") as client:
        first = await client.say("reset the config", agent_type="coder")
        (ask,) = of(first, "tool_call")
        assert (ask["tool_name"], ask["arguments"]) == ("prompt_user", question)
        assert ask["requires_approval"] is False
        assert first[-1]["status"] == "awaiting_tool_result"
        second = await client.result(ask["call_id"], {"answer": "no"})
    assert text_of(second) == "Keeping it."
    told = mesh.scripted.requests[-1]["messages"][-1]
    assert told["role"] == "tool" and json.loads(told["content"]) == {"answer": "no"}
