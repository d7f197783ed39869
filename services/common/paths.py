"""Workspace paths as the IDE names them (pure functions, shared by hitl and the orchestrator).

The IDE may run on Windows: backslashes count as separators and drive letters as roots.
hitl asks "is this inside the workspace?" for its approval policy; the orchestrator's
file rules ask the same before a tool call reaches the IDE. One answer serves both.
"""

from __future__ import annotations

import posixpath
import re

__all__ = ["is_absolute", "normalise_workspace_path", "workspace_relative"]

_DRIVE = re.compile(r"^[A-Za-z]:")


def is_absolute(path: str) -> bool:
    """True for ``/x`` and for a Windows drive path (``C:\\x``, ``C:x``); separators as given."""
    return path.startswith("/") or bool(_DRIVE.match(path))


def normalise_workspace_path(path: str) -> str | None:
    """Normalise a workspace-relative path to ``a/b/c`` form, or ``None`` if it is unsafe.

    Unsafe: empty, contains NUL, absolute (``/x``, ``\\x``, ``C:\\x``, ``C:x``, UNC), starts
    with ``~`` (a shell would expand it to the home directory), or climbs above the
    workspace with ``..``. Backslashes count as separators because the IDE may run on
    Windows; for the same reason segments made only of dots and spaces other than ``.``
    and ``..`` are refused (Windows strips trailing dots/spaces, so ``.. `` means ``..``).
    The workspace root itself is ``"."``.
    """
    if not path or "\x00" in path:
        return None
    unified = path.replace("\\", "/")
    if unified.startswith("~") or is_absolute(unified):
        return None
    parts: list[str] = []
    for segment in unified.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                return None
            parts.pop()
        elif not segment.strip(". "):
            return None
        else:
            parts.append(segment)
    return "/".join(parts) or "."


def workspace_relative(path: str, root: str) -> str | None:
    """Like ``normalise_workspace_path`` but accepts absolute paths inside an absolute root."""
    unified, root_unified = path.replace("\\", "/"), root.replace("\\", "/")
    if is_absolute(root_unified) and is_absolute(unified):
        if "\x00" in unified:
            return None
        resolved, base = posixpath.normpath(unified), posixpath.normpath(root_unified)
        if _DRIVE.match(base):  # drive letters are case-insensitive
            resolved, base = resolved.lower(), base.lower()
        if resolved == base:
            return "."
        if not resolved.startswith(base.rstrip("/") + "/"):
            return None
        unified = resolved[len(base.rstrip("/")) + 1 :]
    return normalise_workspace_path(unified)
