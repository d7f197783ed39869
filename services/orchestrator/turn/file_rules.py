"""File restrictions on the paths a tool call names (pure functions).

Every agent is confined to the workspace: a path that is absolute, starts with ``~``,
contains a control character, climbs out with ``..`` or changes meaning once decoded (a URI scheme,
percent-encoding, Unicode lookalikes: ``path_decoding``) is refused. A file a tool writes
may not end with a separator (``x.md/`` names a directory, whatever its name looks like).
An agent template may also restrict which files it *writes* (the architect: ``[r"\\.md$"]``).

Write patterns are case-sensitive regular expressions applied with ``re.search`` to the
normalised workspace-relative path (``a/b/c``): ``notes.md/../main.py`` is checked as
``main.py``. ``README.MD`` therefore does not match ``\\.md$``; a template that wants
case-insensitive matching says so with ``(?i)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.paths import normalise_workspace_path
from services.orchestrator.turn.path_decoding import decoding_hazard

__all__ = [
    "FILE_RESTRICTION_ERROR",
    "PATCH_ARGUMENTS",
    "PATH_ARGUMENTS",
    "WRITE_TOOLS",
    "PathCheck",
    "check_paths",
]

FILE_RESTRICTION_ERROR = "FILE_RESTRICTION_ERROR"

# Arguments that hold a single workspace path. search_in_code's file_pattern is a glob, not
# a path, so it is left to the IDE.
PATH_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "read_file": ("path",),
    "write_file": ("path",),
    "list_files": ("path",),
    "create_directory": ("path",),
    "search_in_code": ("path",),
    "execute_command": ("cwd",),
    "run_command": ("cwd",),
    "git.diff": ("path",),
}
# Arguments that hold a unified diff: the paths are inside it.
PATCH_ARGUMENTS: Mapping[str, str] = {"apply_patch": "patch", "apply_patch_review": "patch"}
WRITE_TOOLS = frozenset({"write_file", "apply_patch", "apply_patch_review", "create_directory"})
DIRECTORY_TOOLS = frozenset({"create_directory"})

# `$` in a pattern also matches before a trailing newline, and control characters in file
# names only ever serve to confuse: refuse them all (NUL included).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
_HEADER = re.compile(r"^(---|\+\+\+) (.*)$")
_GIT_MOVE = re.compile(r"^(?:rename|copy) (?:from|to) (.*)$")
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_QUOTED_PAIR = re.compile(r'^("(?:[^"\\]|\\.)*") ("(?:[^"\\]|\\.)*")$')


@dataclass(frozen=True)
class PathCheck:
    """Outcome of ``check_paths``.

    On refusal ``code`` is ``FILE_RESTRICTION_ERROR``, ``message`` tells the model what is
    wrong and ``path`` is the offending path as written (``None`` if it was not a string).
    ``normalised`` is the arguments with each path argument in normalised form; patches
    are left as written.
    """

    ok: bool
    code: str | None = None
    message: str | None = None
    path: str | None = None
    normalised: dict[str, Any] = field(default_factory=dict)


def _refuse(message: str, path: str | None) -> PathCheck:
    return PathCheck(False, FILE_RESTRICTION_ERROR, message, path, {})


def _unsafe_reason(path: str) -> str | None:
    """Why ``path`` may not be used by any agent, or ``None`` if it is fine."""
    if not path:
        return "is empty (use '.' for the workspace root)"
    if _CONTROL.search(path):
        return "contains a control character"
    hazard = decoding_hazard(path)
    if hazard is not None:
        return hazard
    unified = path.replace("\\", "/")
    if unified.startswith("~"):
        return "starts with '~'; use a path relative to the workspace root"
    if unified.startswith("/") or _DRIVE.match(unified):
        return "is absolute; use a path relative to the workspace root"
    if normalise_workspace_path(path) is None:
        if any(seg not in ("", ".", "..") and not seg.strip(". ") for seg in unified.split("/")):
            return "has a segment made only of dots and spaces"
        return "escapes the workspace with '..'"
    return None


def _directory_reason(tool_name: str, path: str) -> str | None:
    """A file write to ``x.md/`` (or ``x.md/.``) names a directory: never a file."""
    if tool_name not in WRITE_TOOLS or tool_name in DIRECTORY_TOOLS:
        return None
    if path.replace("\\", "/").rstrip(".").endswith("/"):
        return "ends with a separator: it names a directory, not a file"
    return None


def _unquote(token: str) -> str | None:
    """Undo git's C-style quoting (``"a/caf\\303\\251.md"``); ``None`` if malformed."""
    if not (len(token) >= 2 and token.startswith('"') and token.endswith('"')):
        return token
    try:
        raw = token[1:-1].encode("ascii").decode("unicode_escape").encode("latin-1")
        return raw.decode("utf-8")
    except (UnicodeError, ValueError):
        return None


def _git_header_paths(rest: str) -> list[str] | None:
    """Both names of ``diff --git a/X b/Y``; ``None`` when they cannot be told apart."""
    quoted = _QUOTED_PAIR.match(rest)
    if quoted:
        first, second = _unquote(quoted.group(1)), _unquote(quoted.group(2))
        return [first, second] if first is not None and second is not None else None
    if not rest.startswith("a/"):
        parts = rest.split(" ")  # `--no-prefix` diff: readable only without spaces
        return parts if len(parts) == 2 and all(parts) else None
    pairs = [(rest[:i], rest[i + 1 :]) for i in range(len(rest)) if rest.startswith(" b/", i)]
    # With spaces in names several splits are possible; git itself picks equal names.
    chosen = [pair for pair in pairs if pair[0][2:] == pair[1][2:]] or pairs
    return list(chosen[0]) if len(chosen) == 1 else None


def _targets(name: str) -> list[str]:
    """What an applier may write for a diff name: ``-p1`` for git names, else either."""
    if name.startswith(("a/", "b/")):
        return [name[2:]]
    first, _, rest = name.replace("\\", "/").partition("/")
    return [name, rest] if first and rest else [name]


_Entry = tuple[str, list[str]] | None


def _patch_paths(patch: str) -> Iterator[_Entry]:
    """Every path a unified diff names, as written and as the files it may write.

    Yields ``None`` for a header that cannot be read: a patch whose targets are unknown
    must not be let through a write restriction.
    """
    lines = [line.removesuffix("\r") for line in patch.split("\n")]
    old_left = new_left = 0
    for index, line in enumerate(lines):
        if old_left > 0 or new_left > 0:
            # Inside a hunk, as git reads it: a removed "-- note" line is not a header. A
            # `---`/`+++` pair is, whatever the counts say: a lenient applier would take it.
            kind = line[:1]
            following = lines[index + 1] if index + 1 < len(lines) else ""
            pair = line.startswith("--- ") and following.startswith("+++ ")
            if kind in (" ", "", "-", "+", "\\") and not pair:
                old_left -= kind in (" ", "", "-")
                new_left -= kind in (" ", "", "+")
                continue
            old_left = new_left = 0  # a short hunk or a smuggled header: read it as a header
        if hunk := _HUNK.match(line):
            old_left, new_left = (int(n) if n is not None else 1 for n in hunk.groups())
        elif line.startswith("diff --git "):
            names = _git_header_paths(line[len("diff --git ") :])
            if names is None:
                yield None
            else:
                yield from ((name, _targets(name)) for name in names)
        elif header := _HEADER.match(line):
            name = _unquote(header.group(2).split("\t", 1)[0])  # drop `diff -u` timestamps
            if name != "/dev/null":
                yield None if name is None else (name, _targets(name))
        elif move := _GIT_MOVE.match(line):
            # rename/copy names carry no a/ b/ prefix: they are workspace paths as written.
            name = _unquote(move.group(1))
            yield None if name is None else (name, [name])


def _pattern_refusal(
    path: str, raw: str, patterns: Sequence[str], agent_name: str
) -> PathCheck | None:
    # A colon after the drive check can only be an NTFS stream (`main.py:x.md` writes into
    # main.py's stream while ending in .md), so restricted writers may not use one.
    if ":" not in path and any(re.search(pattern, path) for pattern in patterns):
        return None
    allowed = " or ".join(patterns)
    return _refuse(f"{agent_name} may only write files matching {allowed}, not {path}", raw)


def _check_patch(
    tool_name: str, patch: object, patterns: Sequence[str], agent_name: str
) -> PathCheck | None:
    if not isinstance(patch, str):
        return _refuse(f"The patch for {tool_name} must be a string", None)
    for entry in _patch_paths(patch):
        if entry is None:
            if not patterns:
                continue  # the IDE reports a malformed patch; ---/+++ lines are still checked
            message = f"Cannot tell which files the patch for {tool_name} touches"
            return _refuse(message + " (unreadable diff header)", None)
        raw, targets = entry
        for candidate in dict.fromkeys([raw, *targets]):
            reason = _unsafe_reason(candidate) or _directory_reason(tool_name, candidate)
            if reason is not None:
                return _refuse(f"Path {raw!r} in the patch for {tool_name} {reason}", raw)
        for target in targets if patterns else ():
            normalised = normalise_workspace_path(target) or target
            refusal = _pattern_refusal(normalised, raw, patterns, agent_name)
            if refusal is not None:
                return refusal
    return None


def check_paths(
    tool_name: str,
    arguments: Mapping[str, Any],
    write_patterns: Sequence[str],
    *,
    agent_name: str = "this agent",
) -> PathCheck:
    """Check every path ``tool_name(arguments)`` names; ``write_patterns`` bind writes only.

    Tools absent from ``PATH_ARGUMENTS`` and ``PATCH_ARGUMENTS`` name no paths and pass
    unchanged. A path argument that is absent is fine (``list_files`` defaults to ``.``).
    """
    restricted = tool_name in WRITE_TOOLS and bool(write_patterns)
    normalised = dict(arguments)
    for name in PATH_ARGUMENTS.get(tool_name, ()):
        if name not in arguments:
            continue
        value = arguments[name]
        if not isinstance(value, str):
            return _refuse(f"Argument '{name}' of {tool_name} must be a string path", None)
        reason = _unsafe_reason(value) or _directory_reason(tool_name, value)
        clean = normalise_workspace_path(value)
        if reason is not None or clean is None:
            reason = reason or "is not a usable workspace path"
            return _refuse(f"Path {value!r} for {tool_name} {reason}", value)
        if restricted:
            refusal = _pattern_refusal(clean, value, write_patterns, agent_name)
            if refusal is not None:
                return refusal
        normalised[name] = clean
    patch_argument = PATCH_ARGUMENTS.get(tool_name)
    if patch_argument is not None and patch_argument in arguments:
        patterns = write_patterns if restricted else ()
        refusal = _check_patch(tool_name, arguments[patch_argument], patterns, agent_name)
        if refusal is not None:
            return refusal
    return PathCheck(True, None, None, None, normalised)
