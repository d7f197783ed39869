"""Apply a unified diff to the workspace, strictly: every context line must match.

Git-style (``a/`` ``b/`` prefixes) and plain ``---``/``+++`` headers, new files from
``/dev/null`` and deletions to it. Nothing is written unless every file's hunks apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clients.cli.errors import ToolFailed
from clients.cli.workspace import Workspace

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NULL = "/dev/null"


@dataclass
class FilePatch:
    """The hunks for one file; ``old``/``new`` are the header names (``/dev/null`` or a path)."""

    old: str
    new: str
    hunks: list[tuple[int, list[str]]] = field(default_factory=list)


def _name(header: str) -> str:
    name = header.split("\t", 1)[0].strip()
    if name.startswith(('"a/', '"b/')):
        name = '"' + name[3:]
    elif name.startswith(("a/", "b/")):
        name = name[2:]
    return name.strip('"')


def parse(patch: str) -> list[FilePatch]:
    """The files of a unified diff; ToolFailed when it has none or a hunk is cut short."""
    files: list[FilePatch] = []
    lines = patch.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if (
            line.startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
        ):
            files.append(FilePatch(_name(line[4:]), _name(lines[index + 1][4:])))
            index += 2
            continue
        hunk = _HUNK.match(line)
        if hunk and files:
            old_count = int(hunk.group(2) or 1)
            new_count = int(hunk.group(4) or 1)
            body: list[str] = []
            index += 1
            while (old_count > 0 or new_count > 0) and index < len(lines):
                text = lines[index]
                kind = text[:1] or " "
                if kind == "\\":
                    index += 1
                    continue
                if kind not in " -+":
                    break
                body.append(kind + text[1:])
                old_count -= kind in " -"
                new_count -= kind in " +"
                index += 1
            if old_count > 0 or new_count > 0:
                raise ToolFailed(f"hunk at {line!r} ends early")
            files[-1].hunks.append((int(hunk.group(1)), body))
            continue
        index += 1
    if not files:
        raise ToolFailed("no file headers (--- / +++) in the patch")
    return files


def _apply_hunks(original: list[str], hunks: list[tuple[int, list[str]]], name: str) -> list[str]:
    result: list[str] = []
    cursor = 0
    for start, body in hunks:
        expected = [line[1:] for line in body if line[0] in " -"]
        position = max(start - 1, 0) if expected else start
        if original[position : position + len(expected)] != expected:
            raise ToolFailed(f"{name}: the hunk at line {start} does not match the file")
        if position < cursor:
            raise ToolFailed(f"{name}: hunks overlap or are out of order")
        result.extend(original[cursor:position])
        result.extend(line[1:] for line in body if line[0] in " +")
        cursor = position + len(expected)
    result.extend(original[cursor:])
    return result


def plan(workspace: Workspace, patch: str) -> list[tuple[Path, str | None]]:
    """What ``patch`` would write (None: delete) per file, writing nothing; ToolFailed when a
    hunk does not apply, PathRefused when a file is outside the workspace."""
    planned: list[tuple[Path, str | None]] = []
    for file in parse(patch):
        name = file.new if file.new != _NULL else file.old
        target = workspace.resolve(name)
        if file.old == _NULL:
            if target.exists():
                raise ToolFailed(f"{name} already exists")
            original: list[str] = []
        elif not target.is_file():
            raise ToolFailed(f"{name}: no such file")
        else:
            original = target.read_text(encoding="utf-8").split("\n")
            if original and original[-1] == "":
                original.pop()
        lines = _apply_hunks(original, file.hunks, name)
        planned.append((target, None if file.new == _NULL else "\n".join(lines) + "\n"))
    return planned


def apply(workspace: Workspace, patch: str) -> list[str]:
    """Apply ``patch``; returns the workspace paths it wrote or deleted."""
    planned = plan(workspace, patch)
    for target, content in planned:
        if content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
    return [target.relative_to(workspace.root).as_posix() for target, _ in planned]
