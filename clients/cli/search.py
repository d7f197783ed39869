"""search_in_code and search_in_project: ripgrep when it is installed, else plain Python.

Both give the same answer: the same files (hidden ones too, never through a symlink, never
in SKIPPED_DIRS, never binary ones), in the same order (``rg --sort path``: each folder's
entries by name, depth first), the same lines. ripgrep is only the faster way there.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clients.cli.workspace import Workspace

MAX_MATCHES = 200
MAX_LINE = 300
SKIPPED_DIRS = frozenset({".git", ".hg", ".venv", "node_modules", "__pycache__", ".mypy_cache"})


def find_ripgrep() -> str | None:
    """``rg`` on the PATH, else beside this Python (the ``ripgrep`` wheel of the dev extras,
    when codelab runs from a venv that is not activated)."""
    beside = Path(sys.executable).parent / "rg"
    return shutil.which("rg") or (str(beside) if os.access(beside, os.X_OK) else None)


RIPGREP = find_ripgrep()
"""The ``rg`` codelab uses (None: the Python path)."""


def walk(base: Path) -> Iterator[Path]:
    """The files under ``base``, as ripgrep visits them (symlinks are not followed)."""
    with os.scandir(base) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_dir():
            if entry.name not in SKIPPED_DIRS:
                yield from walk(Path(entry.path))
        elif entry.is_file():
            yield Path(entry.path)


def _match(workspace: Workspace, path: Path, number: int, line: str) -> dict[str, Any]:
    text = line.rstrip("\r\n")[:MAX_LINE]
    return {"path": workspace.relative(path), "line": number, "text": text}


def _pattern(query: str) -> re.Pattern[str] | None:
    """``query`` as a regular expression; None when it is not one (it is then literal text)."""
    try:
        return re.compile(query)
    except re.error:
        return None


def python_search(
    workspace: Workspace, query: str, base: Path, file_pattern: str | None, limit: int
) -> list[dict[str, Any]]:
    """Lines matching ``query`` (a regular expression, or literal text when it is not one)."""
    pattern = _pattern(query) or re.compile(re.escape(query))
    matches: list[dict[str, Any]] = []
    for path in walk(base) if base.is_dir() else [base]:
        if file_pattern and not fnmatch.fnmatch(path.name, file_pattern):
            continue
        try:
            text = path.read_bytes().decode("utf-8")  # "\r\n" kept, as ripgrep reads it
        except (UnicodeDecodeError, OSError):
            continue
        if "\x00" in text:  # binary, as ripgrep judges it
            continue
        lines = text.split("\n")  # ripgrep's lines: "\n" ends one, "\r" stays in it
        if lines[-1] == "":
            lines.pop()
        for number, line in enumerate(lines, 1):
            if pattern.search(line):
                matches.append(_match(workspace, path, number, line))
                if len(matches) >= limit:
                    return matches
    return matches


async def ripgrep_search(
    rg: str, workspace: Workspace, query: str, base: Path, file_pattern: str | None, limit: int
) -> list[dict[str, Any]]:
    """The same answer from ``rg --json``; a query ripgrep's regex engine refuses
    (look-around, back-references) or a failed run is answered by ``python_search``."""
    args = [rg, "--json", "--sort", "path", "--hidden", "--no-ignore", "--no-config"]
    args += ["--max-count", str(limit)]
    args += ["-e", query] if _pattern(query) else ["--fixed-strings", "-e", query]
    if file_pattern:
        args += ["--glob", file_pattern]
    args += [f"--glob=!{name}/" for name in sorted(SKIPPED_DIRS)]  # folders only; later wins
    process = await asyncio.create_subprocess_exec(
        *args,
        "--",
        str(base),
        cwd=workspace.root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, _ = await process.communicate()
    if process.returncode not in (0, 1):  # 1: nothing matched
        return python_search(workspace, query, base, file_pattern, limit)
    matches: list[dict[str, Any]] = []
    for raw in stdout.splitlines():
        record = json.loads(raw)
        data = record.get("data") or {}
        if record.get("type") != "match" or "text" not in data["path"]:
            continue
        path = workspace.root / data["path"]["text"]
        if file_pattern and not fnmatch.fnmatch(path.name, file_pattern):
            continue  # rg's globs also match folders; the Python path matches file names
        line = data["lines"].get("text")
        if line is not None:
            matches.append(_match(workspace, path, data["line_number"], line))
        if len(matches) >= limit:
            break
    return matches


def project_files(workspace: Workspace, query: str, limit: int) -> list[str]:
    """Workspace files whose path contains ``query`` (case-insensitive)."""
    needle = query.lower()
    found = [
        workspace.relative(path)
        for path in walk(workspace.root)
        if needle in workspace.relative(path).lower()
    ]
    return found[:limit]
