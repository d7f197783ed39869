"""search_in_code and search_in_project: ripgrep when it is installed, else plain Python."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Any

from clients.cli.workspace import Workspace

MAX_MATCHES = 200
MAX_LINE = 300
SKIPPED_DIRS = frozenset({".git", ".hg", ".venv", "node_modules", "__pycache__", ".mypy_cache"})


def _walk(base: Path) -> list[Path]:
    files: list[Path] = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        files.extend(Path(folder) / name for name in sorted(names))
    return files


def python_search(
    workspace: Workspace, query: str, base: Path, file_pattern: str | None, limit: int
) -> list[dict[str, Any]]:
    """Lines matching ``query`` (a regular expression, or literal text when it is not one)."""
    try:
        pattern = re.compile(query)
    except re.error:
        pattern = re.compile(re.escape(query))
    matches: list[dict[str, Any]] = []
    for path in _walk(base) if base.is_dir() else [base]:
        if file_pattern and not fnmatch.fnmatch(path.name, file_pattern):
            continue
        try:
            if path.is_symlink() and workspace.root not in path.resolve().parents:
                continue
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                matches.append(
                    {"path": workspace.relative(path), "line": number, "text": line[:MAX_LINE]}
                )
                if len(matches) >= limit:
                    return matches
    return matches


async def ripgrep_search(
    rg: str, workspace: Workspace, query: str, base: Path, file_pattern: str | None, limit: int
) -> list[dict[str, Any]]:
    """The same answer from ``rg --json`` (faster on big trees, honours .gitignore)."""
    args = [rg, "--json", "--max-count", str(limit), "-e", query]
    if file_pattern:
        args += ["--glob", file_pattern]
    process = await asyncio.create_subprocess_exec(
        *args, str(base), cwd=workspace.root, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await process.communicate()
    matches: list[dict[str, Any]] = []
    for raw in stdout.splitlines():
        record = json.loads(raw)
        if record.get("type") != "match":
            continue
        data = record["data"]
        path = workspace.root / data["path"]["text"]
        text = data["lines"].get("text", "").rstrip("\n")
        matches.append(
            {"path": workspace.relative(path), "line": data["line_number"], "text": text[:MAX_LINE]}
        )
        if len(matches) >= limit:
            break
    return matches


def project_files(workspace: Workspace, query: str, limit: int) -> list[str]:
    """Workspace files whose path contains ``query`` (case-insensitive)."""
    needle = query.lower()
    found = [
        workspace.relative(path)
        for path in _walk(workspace.root)
        if needle in workspace.relative(path).lower()
    ]
    return found[:limit]
