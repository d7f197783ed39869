"""The interactive codelab in a pseudo-terminal against the mesh: a question answered with a
tool run in the project folder, then ``--session`` showing the history and going on."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.faces.pty_support import codelab_in_a_pty
from tests.support.mesh import Mesh

PROMPT = "orchestrator ›"  # the agent in charge between turns


async def test_a_question_answered_then_the_session_resumed(mesh: Mesh, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
        {"text": "Just **main.py** here."},
    )
    async with codelab_in_a_pty(
        "--agent", "ask", "--url", mesh.gateway_url, cwd=tmp_path
    ) as screen:
        banner = await screen.expect("Ctrl-C cancels, Ctrl-D quits")
        (session,) = re.findall(r"session (cli-[0-9a-f]+) in ", banner)
        assert str(tmp_path) in banner.replace("\n", "")
        await screen.expect(PROMPT)
        screen.type("what is in this folder?\r")
        await screen.expect("list_files")
        await screen.expect("Just main.py here.")
        await screen.expect(PROMPT)  # typed before it, keys would meet a cooked terminal
        screen.type("/quit\r")
        await screen.expect(f"resume with: codelab --session {session}")
        assert await screen.process.wait() == 0
    tool = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert json.loads(tool["content"]) == ["main.py"]

    mesh.scripted.enqueue({"text": "Still the same project."})
    resume = ("--session", session, "--agent", "ask", "--url", mesh.gateway_url)
    async with codelab_in_a_pty(*resume, cwd=tmp_path) as screen:
        history = await screen.expect(f"session {session} in ")
        assert "user: what is in this folder?" in history
        assert 'tool: ["main.py"]' in history
        assert "assistant: Just **main.py** here." in history
        await screen.expect(PROMPT)
        screen.type("and now?\r")
        await screen.expect("Still the same project.")
        await screen.expect(PROMPT)
        screen.type("\x04")  # Ctrl-D at the prompt quits
        await screen.expect(f"resume with: codelab --session {session}")
        assert await screen.process.wait() == 0


async def test_ctrl_c_at_an_approval_cancels_the_turn_and_codelab_goes_on(
    mesh: Mesh, tmp_path: Path
) -> None:
    write = {"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}}
    mesh.scripted.enqueue({"tool_calls": [write]}, {"text": "Next turn answered."})
    async with codelab_in_a_pty(
        "--agent", "coder", "--url", mesh.gateway_url, cwd=tmp_path
    ) as screen:
        await screen.expect(PROMPT)
        screen.type("write a.py\r")
        await screen.expect("+x = 1")
        await screen.expect("allow?")
        screen.type("\x03")  # in raw mode a key, not SIGINT
        await screen.expect("cancelling… (Ctrl-C again to quit)")
        await screen.expect("turn cancelled")
        await screen.expect("coder ›")  # cancelled where it stood: the coder still in charge
        screen.type("go on\r")
        await screen.expect("Next turn answered.")
        await screen.expect(PROMPT)
        screen.type("/quit\r")
        await screen.expect("resume with: codelab --session")
        assert await screen.process.wait() == 0
    assert "Traceback" not in screen.text
    assert not (tmp_path / "a.py").exists()
