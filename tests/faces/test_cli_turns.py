"""codelab against the real mesh: turns, tools run in a temp workspace, approvals, plans,
a dropped connection, resuming a session."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.cli.driver import Driver
from clients.cli.person import CallDecision, PatchReview, PlanDecision
from tests.faces.cli_support import codelab
from tests.support.ide import ide, of
from tests.support.mesh import Mesh

PLAN = {
    "goal": "Add logging",
    "subtasks": [
        {"description": "Design the logging", "agent": "architect"},
        {"description": "Read the API", "agent": "coder"},
    ],
}


def tool_messages(mesh: Mesh) -> list[dict[str, Any]]:
    return [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"]


async def test_a_read_runs_here_and_the_answer_streams(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text("print('hi')\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "hello.py"}}]},
        {"text": "It prints **hi**.", "chunk_size": 3},
    )
    async with codelab(mesh, tmp_path, "cli-read") as cli:
        status = await cli.driver.say("explain hello.py", agent_type="ask")
    assert status == "completed"
    assert tool_messages(mesh)[-1]["content"] == json.dumps("print('hi')\n")
    assert "read_file" in cli.text and "It prints hi." in cli.text
    assert "⇄ orchestrator → ask" in cli.text


async def test_a_write_approved_with_an_edit_lands_edited(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 0\n")
    mesh.scripted.enqueue(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}}
            ]
        },
        {"text": "Written."},
    )
    async with codelab(mesh, tmp_path, "cli-edit") as cli:
        edited = {"path": "a.py", "content": "x = 2\n"}
        cli.person.calls.append(CallDecision("edit", arguments=edited))
        assert await cli.driver.say("set x", agent_type="coder") == "completed"
    assert "-x = 0\n+x = 1" in cli.person.previews[0]
    assert (tmp_path / "a.py").read_text() == "x = 2\n"
    audit = await mesh.pool.fetch(
        "select decision from hitl.audit_log where session_id = 'cli-edit'"
    )
    assert [r["decision"] for r in audit] == ["edit"]


async def test_a_rejected_write_tells_the_model_why(mesh: Mesh, tmp_path: Path) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.py", "content": "x"}}]},
        {"text": "Understood."},
    )
    async with codelab(mesh, tmp_path, "cli-reject") as cli:
        cli.person.calls.append(CallDecision("reject", feedback="use tabs"))
        assert await cli.driver.say("write b", agent_type="coder") == "completed"
    assert not (tmp_path / "b.py").exists()
    assert "use tabs" in tool_messages(mesh)[-1]["content"]


async def test_a_refused_path_reaches_the_model_as_an_error(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "link/hostname"}}]},
        {"text": "Cannot read it."},
    )
    async with codelab(mesh, tmp_path, "cli-escape") as cli:
        assert await cli.driver.say("read it", agent_type="ask") == "completed"
    assert (
        "IDE: FILE_RESTRICTION_ERROR: Path 'link/hostname' leads outside"
        in tool_messages(mesh)[-1]["content"]
    )
    assert "✗ read_file: FILE_RESTRICTION_ERROR" in cli.text


PATCH = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 2\n b = 1\n"
KEPT = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 3\n b = 1\n"


def patch_turn(reviewed: str) -> tuple[dict[str, Any], ...]:
    """The model puts PATCH up for review, then applies what the review kept."""
    return (
        {"tool_calls": [{"name": "apply_patch_review", "arguments": {"patch": PATCH}}]},
        {"tool_calls": [{"name": "apply_patch", "arguments": {"patch": reviewed}}]},
        {"text": "Applied what you kept."},
    )


@pytest.mark.parametrize(
    ("review", "applied", "decision", "a"),
    [
        (PatchReview("keep"), PATCH, "approve", "a = 2"),
        (PatchReview("edit", patch=KEPT), KEPT, "edit", "a = 3"),
    ],
)
async def test_a_patch_review_asks_once_and_the_kept_patch_is_written_once(
    mesh: Mesh, tmp_path: Path, review: PatchReview, applied: str, decision: str, a: str
) -> None:
    app = tmp_path / "app.py"
    app.write_text("a = 1\nb = 1\n")
    mesh.scripted.enqueue(*patch_turn(applied))
    session = f"cli-review-{decision}"
    async with codelab(mesh, tmp_path, session) as cli:
        cli.person.reviews.append(review)
        assert await cli.driver.say("bump a", agent_type="coder") == "completed"
    assert cli.person.reviewed == [PATCH] and not cli.person.previews  # no second question
    # Had the review written anything, apply_patch would have failed on the changed file.
    results = [json.loads(m["content"]) for m in tool_messages(mesh)]
    assert results == [{"decision": decision, "patch": applied}, {"applied": ["app.py"]}]
    assert app.read_text() == f"{a}\nb = 1\n"
    audit = await mesh.pool.fetch(
        "select decision, event_type from hitl.audit_log where session_id = $1", session
    )
    assert [(r["decision"], r["event_type"]) for r in audit] == [(decision, "patch_review")]
    assert "error" not in cli.text


async def test_a_patch_rejected_in_review_writes_nothing(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("a = 1\nb = 1\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "apply_patch_review", "arguments": {"patch": PATCH}}]},
        {"text": "Dropped it."},
    )
    async with codelab(mesh, tmp_path, "cli-review-reject") as cli:
        cli.person.reviews.append(PatchReview("reject", feedback="a stays 1"))
        assert await cli.driver.say("bump a", agent_type="coder") == "completed"
    assert (tmp_path / "app.py").read_text() == "a = 1\nb = 1\n"
    told = tool_messages(mesh)[-1]["content"]
    assert "rejected the whole patch" in told and "a stays 1" in told


async def test_a_patch_that_cannot_apply_is_not_put_to_review(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("a = 5\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "apply_patch_review", "arguments": {"patch": PATCH}}]},
        {"text": "It did not apply."},
    )
    async with codelab(mesh, tmp_path, "cli-review-stale") as cli:
        assert await cli.driver.say("bump a", agent_type="coder") == "completed"
    assert not cli.person.reviewed
    assert "app.py: the hunk at line 1 does not match" in tool_messages(mesh)[-1]["content"]


async def test_a_plan_approved_ticks_its_checklist(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "api.py").write_text("def api(): ...\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "create_plan", "arguments": PLAN}]},
        {"text": "Design written."},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "api.py"}}]},
        {"text": "Read it."},
    )
    async with codelab(mesh, tmp_path, "cli-plan") as cli:
        cli.person.plans.append(PlanDecision("approve"))
        assert await cli.driver.say("add logging", agent_type="coder") == "completed"
    assert [s["desc"] for s in cli.person.plan_steps[0]] == ["Design the logging", "Read the API"]
    assert "[x] 1. Design the logging  (architect)" in cli.text
    assert "[x] 2. Read the API  (coder)" in cli.text
    assert "chain: ✓ architect → ✓ coder" in cli.text
    assert tool_messages(mesh)[-1]["content"] == json.dumps("def api(): ...\n")


async def test_a_dropped_connection_resumes_without_duplicated_text(
    mesh: Mesh, tmp_path: Path
) -> None:
    words = " ".join(f"w{i}" for i in range(25))
    mesh.scripted.enqueue({"text": words, "chunk_size": 4, "token_delay_ms": 40})
    async with codelab(mesh, tmp_path, "cli-drop") as cli:
        message = {"type": "user_message", "content": "talk", "agent_type": "coder"}
        await cli.driver.connection.send(message)
        first = await cli.driver.connection.next_event()
        while first["type"] != "assistant_message":
            first = await cli.driver.connection.next_event()
        cli.driver.connection.drop()
        cli.driver.view.event(first)
        assert await cli.driver.follow() == "completed"
        assert cli.driver.connection.reconnects == 1
    assert words in cli.text
    assert cli.text.count("w24") == 1


async def test_ctrl_c_cancels_the_turn_and_a_running_command(mesh: Mesh, tmp_path: Path) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "execute_command", "arguments": {"command": "sleep 30"}}]}
    )
    async with codelab(mesh, tmp_path, "cli-cancel") as cli:
        started = asyncio.Event()
        running = cli.driver.view.tool_running

        @contextlib.contextmanager
        def noted(call: dict[str, Any]) -> Iterator[None]:
            started.set()
            with running(call):
                yield

        cli.driver.view.tool_running = noted  # type: ignore[method-assign]
        turn = asyncio.ensure_future(cli.driver.say("wait", agent_type="debug"))
        async with asyncio.timeout(20):
            await started.wait()
        assert cli.driver.interrupt() is False
        assert await turn == "cancelled"
        assert cli.driver.interrupt() is True
    assert "turn cancelled" in cli.text


async def test_resuming_runs_what_was_dispatched_while_away(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("remember\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "n.md", "content": "x"}}]},
        {"text": "All done."},
    )
    async with ide(mesh, "cli-resume") as other:
        events = await other.say("go", agent_type="coder")
        assert events[-1]["status"] == "awaiting_tool_result"
    async with codelab(mesh, tmp_path, "cli-resume") as cli:
        assert await cli.driver.recover(_gateway(mesh)) is True
        cli.person.calls.append(CallDecision("approve"))
        assert await cli.driver.follow() == "completed"
    assert json.dumps("remember\n") in [m["content"] for m in tool_messages(mesh)]
    assert (tmp_path / "n.md").read_text() == "x"


async def test_resuming_asks_about_a_pending_approval(mesh: Mesh, tmp_path: Path) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "p.md", "content": "y"}}]},
        {"text": "Fine."},
    )
    async with ide(mesh, "cli-pending") as other:
        assert (await other.say("go", agent_type="coder"))[-1]["status"] == "awaiting_approval"
    async with codelab(mesh, tmp_path, "cli-pending") as cli:
        cli.person.calls.append(CallDecision("approve"))
        assert await cli.driver.recover(_gateway(mesh)) is True
        assert await cli.driver.follow() == "completed"
        assert "+y" in cli.person.previews[0]
        assert await cli.driver.recover(_gateway(mesh)) is False
    assert (tmp_path / "p.md").read_text() == "y"


def _gateway(mesh: Mesh) -> Any:
    from clients.cli.connection import Gateway

    return Gateway(mesh.gateway_url)


__all__ = ["Driver", "of"]
