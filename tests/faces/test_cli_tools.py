"""codelab's IDE tools, run for real in a temporary workspace (no mesh needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clients.cli.errors import NoPerson, PathRefused, ToolFailed, ToolTimedOut, UnknownTool
from clients.cli.person import Nobody
from clients.cli.preview import edit_arguments, preview
from clients.cli.tools import Toolbox
from clients.cli.workspace import Workspace


@pytest.fixture
def box(tmp_path: Path) -> Toolbox:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def main():\n    return 1\n")
    (tmp_path / "README.md").write_text("# demo\n")
    return Toolbox(Workspace(tmp_path), Nobody(), ripgrep=None)


async def run(box: Toolbox, tool: str, **arguments: Any) -> Any:
    return await box.run(tool, arguments)


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/etc/passwd", "~/.bashrc", "src/../../x", "a\x00b", "bad\nname"]
)
async def test_paths_that_leave_the_workspace_are_refused(box: Toolbox, path: str) -> None:
    with pytest.raises(PathRefused) as refused:
        await run(box, "read_file", path=path)
    assert refused.value.as_result_error().startswith("FILE_RESTRICTION_ERROR: ")


async def test_a_symlink_out_of_the_workspace_is_refused(box: Toolbox, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("secret")
    (tmp_path / "link.txt").symlink_to(outside)
    with pytest.raises(PathRefused, match="symlink"):
        await run(box, "read_file", path="link.txt")
    with pytest.raises(PathRefused):
        await run(box, "write_file", path="link.txt", content="x")
    assert outside.read_text() == "secret"
    assert "link.txt" not in await run(box, "list_files")


async def test_files_are_read_listed_written_and_made(box: Toolbox, tmp_path: Path) -> None:
    assert await run(box, "read_file", path="src/app.py", start_line=2) == "    return 1\n"
    assert await run(box, "list_files") == ["README.md", "src/"]
    assert await run(box, "list_files", path=".", recursive=True) == [
        "README.md",
        "src/",
        "src/app.py",
    ]
    written = await run(box, "write_file", path="docs/notes.md", content="hi\n")
    assert written == {"path": "docs/notes.md", "bytes_written": 3}
    assert (tmp_path / "docs" / "notes.md").read_text() == "hi\n"
    assert await run(box, "create_directory", path="build/out") == {
        "path": "build/out",
        "created": True,
    }
    with pytest.raises(ToolFailed, match="no such file"):
        await run(box, "read_file", path="missing.py")
    with pytest.raises(ToolFailed, match="not a directory"):
        await run(box, "list_files", path="README.md")


async def test_search_in_code_and_project_without_ripgrep(box: Toolbox) -> None:
    assert await run(box, "search_in_code", query="return \\d") == [
        {"path": "src/app.py", "line": 2, "text": "    return 1"}
    ]
    assert await run(box, "search_in_code", query="demo", file_pattern="*.py") == []
    found = await run(box, "search_in_project", query="app")
    assert found["files"] == ["src/app.py"]


async def test_commands_run_in_the_workspace_with_their_output(box: Toolbox) -> None:
    result = await run(box, "execute_command", command="ls && echo oops >&2; exit 3", cwd="src")
    assert result == {"exit_code": 3, "stdout": "app.py\n", "stderr": "oops\n", "truncated": False}
    big = await run(box, "run_command", command=f"{sys.executable} -c \"print('x' * 200000)\"")
    assert big["truncated"] and "bytes omitted" in big["stdout"]
    assert len(big["stdout"]) < 70_000


async def test_a_command_past_its_timeout_is_killed(box: Toolbox, tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    with pytest.raises(ToolTimedOut) as stopped:
        await run(box, "execute_command", command=f"sleep 30 && touch {marker}", timeout=1)
    assert stopped.value.as_result_error().startswith("TOOL_TIMEOUT: ")
    assert not marker.exists()


PATCH = """--- a/src/app.py
+++ b/src/app.py
@@ -1,2 +1,3 @@
 def main():
-    return 1
+    print("hi")
+    return 0
--- /dev/null
+++ b/src/new.py
@@ -0,0 +1 @@
+VALUE = 2
"""


async def test_patches_apply_strictly(box: Toolbox, tmp_path: Path) -> None:
    assert await run(box, "apply_patch", patch=PATCH) == {"applied": ["src/app.py", "src/new.py"]}
    assert (
        tmp_path / "src" / "app.py"
    ).read_text() == 'def main():\n    print("hi")\n    return 0\n'
    assert (tmp_path / "src" / "new.py").read_text() == "VALUE = 2\n"
    with pytest.raises(ToolFailed, match="does not match"):
        await run(box, "apply_patch_review", patch=PATCH.split("--- /dev/null")[0])
    with pytest.raises(ToolFailed, match="no file headers"):
        await run(box, "apply_patch", patch="just words")
    with pytest.raises(PathRefused):
        await run(box, "apply_patch", patch=PATCH.replace("b/src/new.py", "b/../new.py"))


def commit_all(folder: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for step in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run([*git, *step], cwd=folder, check=True)


async def test_git_diff_in_a_repository_and_outside_one(box: Toolbox, tmp_path: Path) -> None:
    with pytest.raises(ToolFailed, match="git diff failed"):
        await run(box, "git.diff")
    commit_all(tmp_path)
    (tmp_path / "README.md").write_text("# changed\n")
    diff = await run(box, "git.diff", path="README.md")
    assert "-# demo" in diff and "+# changed" in diff


async def test_unknown_tools_and_questions_without_a_person(box: Toolbox) -> None:
    with pytest.raises(UnknownTool) as unknown:
        await run(box, "format_disk")
    assert unknown.value.code == "TOOL_VALIDATION_ERROR"
    with pytest.raises(NoPerson):
        await run(box, "prompt_user", question="which one?", options=["a", "b"])


async def test_previews_show_a_diff_or_why_a_command_was_flagged(box: Toolbox) -> None:
    write = {"tool_name": "write_file", "arguments": {"path": "src/app.py", "content": "x = 1\n"}}
    shown = preview(box.workspace, write)
    assert "--- a/src/app.py" in shown and "-def main():" in shown and "+x = 1" in shown
    new = preview(
        box.workspace, {"tool_name": "write_file", "arguments": {"path": "n.py", "content": "y\n"}}
    )
    assert new.startswith("--- /dev/null\n+++ b/n.py")
    command = {
        "tool_name": "execute_command",
        "arguments": {"command": "rm -rf build"},
        "reason": "deletes files",
    }
    assert preview(box.workspace, command) == "$ rm -rf build\n(in .) flagged: deletes files"


async def test_edit_opens_the_editor_on_the_arguments(tmp_path: Path) -> None:
    script = (
        "import sys; p = sys.argv[1]; t = open(p).read(); open(p, 'w').write(t.replace('1', '2'))"
    )
    editor = [sys.executable, "-c", script]
    write = {"tool_name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}}
    assert await edit_arguments(write, editor) == {"path": "a.py", "content": "x = 2\n"}
    command = {"tool_name": "execute_command", "arguments": {"command": "sleep 1"}}
    assert await edit_arguments(command, editor) == {"command": "sleep 2"}
    breaking = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{oops')"]
    with pytest.raises(ToolFailed, match="not JSON"):
        await edit_arguments(command, breaking)
    with pytest.raises(ToolFailed, match="exited with status 1"):
        await edit_arguments(command, [sys.executable, "-c", "raise SystemExit(1)"])
    with pytest.raises(ToolFailed, match="cannot start the editor"):
        await edit_arguments(command, [str(tmp_path / "no-such-editor")])
