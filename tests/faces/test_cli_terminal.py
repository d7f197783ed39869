"""The person at the terminal, typed through prompt_toolkit's real input pipeline."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from clients.cli.person import CallDecision, PlanDecision
from clients.cli.terminal import TerminalPerson
from clients.cli.view import RichView
from clients.cli.workspace import Workspace

EDITOR = [
    sys.executable,
    "-c",
    "import sys; p = sys.argv[1]; t = open(p).read(); open(p, 'w').write(t.replace('1', '2'))",
]
WRITE = {
    "call_id": "c1",
    "tool_name": "write_file",
    "arguments": {"path": "a.py", "content": "x = 1\n"},
    "reason": "File modification requires approval",
}


@contextmanager
def terminal(tmp_path: Path) -> Iterator[tuple[TerminalPerson, PipeInput, io.StringIO]]:
    screen = io.StringIO()
    view = RichView(Console(file=screen, width=100, force_terminal=False))
    with create_pipe_input() as keys:
        prompts: PromptSession[str] = PromptSession(input=keys, output=DummyOutput())
        yield TerminalPerson(view, Workspace(tmp_path), prompts, EDITOR), keys, screen


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
