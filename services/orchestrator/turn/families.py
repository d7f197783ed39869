"""Per-session maps whose keys include delegates' sessions ("<parent>.<call id>", nested).

A message's end forgets what was kept for its session and every delegate under it. Finding
those keys by walking the whole map made each end cost one look at every session handled
by the process (quadratic at 1,000 live sessions); the delegates are indexed by their root.
"""

from __future__ import annotations

from typing import TypeVar

V = TypeVar("V")


class FamilyMap(dict[str, V]):
    """A dict keyed by session id that can drop a session with its delegates' keys (items
    are set with ``map[key] = value`` or ``setdefault``, which index them)."""

    def __init__(self) -> None:
        super().__init__()
        self._delegates: dict[str, set[str]] = {}

    def __setitem__(self, key: str, value: V) -> None:
        root, dot, _ = key.partition(".")
        if dot:
            self._delegates.setdefault(root, set()).add(key)
        super().__setitem__(key, value)

    def setdefault(self, key: str, default: V) -> V:
        if key not in self:
            self[key] = default
        return self[key]

    def drop_family(self, sid: str) -> list[str]:
        """Remove ``sid`` and every key under it; returns the keys that were present."""
        root = sid.partition(".")[0]
        under = self._delegates.get(root, set())
        below = [key for key in under if key.startswith(sid + ".")]
        under.difference_update(below)
        under.discard(sid)
        if not under:
            self._delegates.pop(root, None)
        return [key for key in (sid, *below) if self.pop(key, _MISSING) is not _MISSING]


_MISSING = object()
