"""What a person sees before approving a call, and ``$EDITOR`` on what they may change."""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from clients.cli.errors import PathRefused, ToolFailed
from clients.cli.workspace import Workspace

PATCH_TOOLS = frozenset({"apply_patch", "apply_patch_review"})
COMMAND_TOOLS = frozenset({"execute_command", "run_command"})


def preview(workspace: Workspace, call: dict[str, Any]) -> str:
    """A unified diff for a write or patch; the command and why it was flagged; else JSON."""
    tool, arguments = call.get("tool_name", ""), call.get("arguments") or {}
    if tool == "write_file" and isinstance(arguments, dict):
        return write_diff(
            workspace, str(arguments.get("path", "")), str(arguments.get("content", ""))
        )
    if tool in PATCH_TOOLS and isinstance(arguments, dict):
        return str(arguments.get("patch", ""))
    if tool in COMMAND_TOOLS and isinstance(arguments, dict):
        where = arguments.get("cwd", ".")
        return (
            f"$ {arguments.get('command', '')}\n(in {where}) flagged: {call.get('reason') or '-'}"
        )
    return json.dumps(arguments, indent=2, ensure_ascii=False)


def write_diff(workspace: Workspace, path: str, content: str) -> str:
    """The change ``write_file(path, content)`` would make, as a unified diff."""
    try:
        target = workspace.resolve(path)
    except PathRefused as refused:
        return f"(refused: {refused.message})"
    before = target.read_text(encoding="utf-8") if target.is_file() else ""
    old_name = f"a/{path}" if target.is_file() else "/dev/null"
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        content.splitlines(keepends=True),
        fromfile=old_name,
        tofile=f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def editor_command(environ: dict[str, str] | None = None) -> list[str]:
    """``$VISUAL`` or ``$EDITOR`` (``vi`` when neither is set), split like a shell would."""
    env = os.environ if environ is None else environ
    return shlex.split(env.get("VISUAL") or env.get("EDITOR") or "vi")


async def edit_arguments(call: dict[str, Any], editor: list[str] | None = None) -> dict[str, Any]:
    """Open the editor on the call's arguments and return them as saved.

    A write_file opens on the file's proposed content (the path stays); anything else on its
    arguments as JSON. ToolFailed when the editor fails or leaves invalid JSON.
    """
    arguments = dict(call.get("arguments") or {})
    tool = call.get("tool_name")
    as_content = tool == "write_file" and isinstance(arguments.get("content"), str)
    suffix = Path(str(arguments.get("path", ""))).suffix if as_content else ".json"
    text = (
        arguments["content"] if as_content else json.dumps(arguments, indent=2, ensure_ascii=False)
    )
    edited = await edit_text(text, suffix, editor)
    if as_content:
        return {**arguments, "content": edited}
    try:
        value = json.loads(edited)
    except json.JSONDecodeError as error:
        raise ToolFailed(f"the edited arguments are not JSON: {error}") from error
    if not isinstance(value, dict):
        raise ToolFailed("the edited arguments must be a JSON object")
    return value


async def edit_text(text: str, suffix: str, editor: list[str] | None = None) -> str:
    """``text`` as the person saved it in the editor (a file named ``*suffix``)."""
    return await asyncio.to_thread(_edit_text, text, suffix, editor or editor_command())


def _edit_text(text: str, suffix: str, editor: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="codelab-edit-") as folder:
        path = Path(folder) / f"arguments{suffix or '.txt'}"
        path.write_text(text, encoding="utf-8")
        try:
            finished = subprocess.run([*editor, str(path)], check=False)
        except OSError as error:
            raise ToolFailed(f"cannot start the editor {editor[0]!r}: {error}") from error
        if finished.returncode != 0:
            raise ToolFailed(f"the editor exited with status {finished.returncode}")
        return path.read_text(encoding="utf-8")
