"""The person at the terminal, typed through prompt_toolkit's real input pipeline: answers,
patch reviews, and Ctrl-C at a question (which cancels the turn, against the mesh)."""

from __future__ import annotations

import functools
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit import PromptSession
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from clients.cli.app import follow_interruptibly
from clients.cli.errors import Interrupted
from clients.cli.person import CallDecision, PatchReview, PlanDecision
from clients.cli.terminal import TerminalPerson
from clients.cli.view import RichView
from clients.cli.workspace import Workspace
from tests.faces.cli_support import connected
from tests.support.mesh import Mesh


def editor_replacing(old: str, new: str) -> list[str]:
    """An ``$EDITOR`` that replaces ``old`` with ``new`` in the file it is given."""
    script = (
        "import sys; p = sys.argv[1]; t = open(p).read();"
        f" open(p, 'w').write(t.replace({old!r}, {new!r}))"
    )
    return [sys.executable, "-c", script]


EDITOR = editor_replacing("1", "2")
WRITE = {
    "call_id": "c1",
    "tool_name": "write_file",
    "arguments": {"path": "a.py", "content": "x = 1\n"},
    "reason": "File modification requires approval",
}


PATCH = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n"


@contextmanager
def terminal(
    tmp_path: Path, editor: list[str] = EDITOR
) -> Iterator[tuple[TerminalPerson, PipeInput, io.StringIO]]:
    screen = io.StringIO()
    view = RichView(Console(file=screen, width=100, force_terminal=False))
    with create_pipe_input() as keys:
        prompts: PromptSession[str] = PromptSession(input=keys, output=DummyOutput())
        yield TerminalPerson(view, Workspace(tmp_path), prompts, editor), keys, screen


async def test_approve_after_a_wrong_key(tmp_path: Path) -> None:
    with terminal(tmp_path) as (person, keys, screen):
        keys.send_text("x\na\n")
        assert await person.review_call(WRITE, "+x = 1\n") == CallDecision("approve")
    assert "answer one of: approve, edit, reject" in screen.getvalue()
    assert "approval needed: write_file (File modification requires approval)" in screen.getvalue()


async def test_edit_opens_the_editor_and_shows_the_new_diff(tmp_path: Path) -> None:
    with terminal(tmp_path) as (person, keys, screen):
        keys.send_text("e\ny\n")
        decision = await person.review_call(WRITE, "+x = 1\n")
    assert decision == CallDecision("edit", arguments={"path": "a.py", "content": "x = 2\n"})
    assert "+x = 2" in screen.getvalue()


async def test_reject_with_feedback_and_plans_and_questions(tmp_path: Path) -> None:
    with terminal(tmp_path) as (person, keys, _):
        keys.send_text("reject\nuse tabs\n")
        assert await person.review_call(WRITE, "") == CallDecision("reject", feedback="use tabs")
        keys.send_text("m\nskip the design\n")
        steps = [{"id": "1", "desc": "Design", "status": "pending", "agent": "architect"}]
        plan = await person.review_plan({"approval_request_id": "p"}, steps)
        assert plan == PlanDecision("modify", feedback="skip the design")
        keys.send_text("2\n")
        assert await person.answer("which?", ["red", "blue"]) == "blue"
        keys.send_text("green\n")
        assert await person.answer("which?", ["red", "blue"]) == "green"


async def test_a_patch_review_keeps_or_rejects_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 0\n")
    with terminal(tmp_path) as (person, keys, screen):
        keys.send_text("k\n")
        assert await person.review_patch(PATCH, "bump x") == PatchReview("keep")
        keys.send_text("r\nnot yet\n")
        rejected = await person.review_patch(PATCH, None)
    assert rejected == PatchReview("reject", feedback="not yet")
    assert rejected.result(PATCH) == {"accepted": False, "feedback": "not yet"}
    assert PatchReview("keep").result(PATCH) == {"patch": PATCH}
    assert "patch review: bump x (nothing is written yet)" in screen.getvalue()
    assert "+x = 1" in screen.getvalue()
    assert (tmp_path / "a.py").read_text() == "x = 0\n"


async def test_a_patch_review_edited_in_the_editor(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 0\n")
    with terminal(tmp_path, editor_replacing("+x = 1", "+x = 5")) as (person, keys, screen):
        keys.send_text("e\ny\n")
        review = await person.review_patch(PATCH, None)
    assert review == PatchReview("edit", patch=PATCH.replace("+x = 1", "+x = 5"))
    assert review.result(PATCH) == {"patch": PATCH.replace("+x = 1", "+x = 5")}
    assert "+x = 5" in screen.getvalue()
    assert (tmp_path / "a.py").read_text() == "x = 0\n"


async def test_an_edited_patch_that_does_not_apply_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 0\n")
    with terminal(tmp_path, editor_replacing("-x = 0", "-x = 9")) as (person, keys, screen):
        keys.send_text("e\nr\n\n")
        review = await person.review_patch(PATCH, None)
    assert review == PatchReview("reject")
    assert "edit failed: a.py: the hunk at line 1 does not match the file" in screen.getvalue()


@pytest.mark.parametrize("key", ["\x03", "\x04"])
async def test_ctrl_c_or_ctrl_d_at_a_question_interrupts(tmp_path: Path, key: str) -> None:
    with terminal(tmp_path) as (person, keys, _):
        keys.send_text(key)
        with pytest.raises(Interrupted):
            await person.review_call(WRITE, "+x = 1\n")
        keys.send_text("r\n" + key)
        with pytest.raises(Interrupted):
            await person.review_patch(PATCH, None)


PLAN = {"goal": "Tidy", "subtasks": [{"description": "Tidy up", "agent": "coder"}]}


@pytest.mark.parametrize(
    ("flagged", "asked"),
    [
        (
            {"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}},
            "approval needed: write_file",
        ),
        ({"name": "create_plan", "arguments": PLAN}, "[ ] Tidy up (coder)"),
    ],
    ids=["approval", "plan"],
)
async def test_ctrl_c_at_a_question_cancels_the_turn_against_the_mesh(
    mesh: Mesh, tmp_path: Path, flagged: dict[str, Any], asked: str
) -> None:
    mesh.scripted.enqueue({"tool_calls": [flagged]})
    with terminal(tmp_path) as (person, keys, screen):
        session = f"cli-ctrl-c-{flagged['name']}"
        async with connected(mesh, person, person.view, tmp_path, session) as driver:
            keys.send_text("\x03")
            turn = functools.partial(driver.say, "do it", agent_type="coder")
            assert await follow_interruptibly(driver, turn) == "cancelled"
            mesh.scripted.enqueue({"text": "Still here."})
            assert await follow_interruptibly(driver, turn) == "completed"
    assert not (tmp_path / "a.py").exists()
    assert asked in screen.getvalue()
    assert "cancelling… (Ctrl-C again to quit)" in screen.getvalue()
    assert "turn cancelled" in screen.getvalue() and "Still here." in screen.getvalue()
