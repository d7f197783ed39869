"""Paths that mean something else to a program that decodes them (pure functions).

On a POSIX disk ``%2e%2e/x``, ``file:/etc/passwd`` or ``․․/x`` (one-dot leaders) are
literal names inside the workspace. An IDE or a library on the way may however URL-decode
the path, read ``file:`` as a URI, or apply Unicode NFKC (which turns fullwidth and leader
dots into ``.``): then the same string steps outside the workspace. Such paths are refused
before anything else looks at them, with a reason the model can act on.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["decoding_hazard"]

# `file:`, `vscode-remote:` ... A single letter is a Windows drive, refused as absolute.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
# Characters with a meaning in a path: a lookalike of one is a disguise, never a name.
_PATH_SYNTAX = frozenset("./\\:%~")


def _percent_hazard(path: str) -> str | None:
    for match in _PERCENT.finditer(path):
        decoded = chr(int(match.group(1), 16))
        if decoded in _PATH_SYNTAX or decoded < " " or decoded == "\x7f":
            encoded = match.group(0)
            return f"has a percent-encoded {decoded!r} ({encoded}) that a URL decoder would apply"
    return None


def _unicode_hazard(path: str) -> str | None:
    # Composition never yields ASCII, so NFKC can only change a path's segments through a
    # character that folds into path syntax: checking each character covers the whole path,
    # and macOS's decomposed names (NFD `cafe\u0301`) still pass.
    for char in path:
        name = unicodedata.name(char, f"U+{ord(char):04X}")
        if unicodedata.category(char) == "Cf":
            return f"contains the invisible format character U+{ord(char):04X} ({name})"
        folded = unicodedata.normalize("NFKC", char)
        if folded != char and _PATH_SYNTAX & set(folded):
            return (
                f"contains U+{ord(char):04X} ({name}), which Unicode normalisation "
                f"turns into {folded!r}"
            )
    return None


def decoding_hazard(path: str) -> str | None:
    """Why ``path`` would change meaning once decoded, or ``None`` when it would not."""
    if _SCHEME.match(path):
        return "starts with a URI scheme; use a path relative to the workspace root"
    return _percent_hazard(path) or _unicode_hazard(path)
