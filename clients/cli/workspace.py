"""The folder codelab runs in, and the one place paths are turned into files.

The lexical rules are the runtime's own (``services.orchestrator.turn.file_rules``): no absolute
path, no ``~``, no ``..`` climbing out, no control bytes. On disk one more rule applies that
only the IDE can check: a symlink must not lead outside the folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clients.cli.errors import PathRefused
from services.common.paths import normalise_workspace_path
from services.orchestrator.turn.file_rules import check_paths


class Workspace:
    """Paths relative to ``root`` that stay inside it, symlinks resolved."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def check_arguments(self, tool_name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments with their paths normalised, or PathRefused (the runtime's rules)."""
        outcome = check_paths(tool_name, arguments, (), agent_name="codelab")
        if not outcome.ok:
            raise PathRefused(outcome.message or f"refused path for {tool_name}")
        return outcome.normalised

    def resolve(self, path: str) -> Path:
        """The file ``path`` names inside the workspace; PathRefused when it would leave it."""
        clean = normalise_workspace_path(path) if isinstance(path, str) else None
        if clean is None or any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
            raise PathRefused(f"Path {path!r} is not a path inside the workspace")
        target = (self.root / clean).resolve()
        if target != self.root and self.root not in target.parents:
            raise PathRefused(f"Path {path!r} leads outside the workspace through a symlink")
        return target

    def relative(self, target: Path) -> str:
        """``target`` as the workspace-relative ``a/b`` the runtime uses."""
        relative = target.resolve().relative_to(self.root).as_posix()
        return relative or "."
