"""Tool names the upstream accepts, and back: the one boundary where catalog names change.

OpenAI-compatible APIs accept function names matching ``^[a-zA-Z0-9_-]{1,64}$``; the
catalog has ``git.diff``, ``agent.<template>`` and MCP tools named ``<source>.<tool>``.
Each request gets a map built from every name it carries (its tools and the history's
tool calls): a valid name stays as it is; another becomes its characters with each
invalid one replaced by ``_``, cut to fit, with a short hash of the original appended
whenever that could be mistaken for another name of the request or was cut. The map is
a function of the request's names alone (no state between calls), and the reply's names
are mapped back before anything else sees them. The IDE, the ledger and the history keep
the catalog's names.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME = 64
_VALID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_HASH = 8


def is_valid(name: str) -> bool:
    return bool(_VALID.fullmatch(name))


def _hashed(name: str, base: str) -> str:
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    return f"{base[: MAX_NAME - _HASH - 1]}_{digest}"


class ToolNames:
    """Catalog name <-> wire name for one request; collision-free in both directions."""

    def __init__(self, names: Iterable[str]) -> None:
        unique = sorted(set(names))
        valid = {n for n in unique if is_valid(n)}
        self._wire: dict[str, str] = {n: n for n in valid}
        taken = set(valid)
        for name in unique:
            if name in valid:
                continue
            base = _INVALID_CHAR.sub("_", name) or "tool"
            wire = base if len(base) <= MAX_NAME and base not in taken else _hashed(name, base)
            while wire in taken:  # a hash collision with another name of the request
                wire = _hashed(wire, base)
            self._wire[name] = wire
            taken.add(wire)
        self._catalog = {wire: name for name, wire in self._wire.items()}

    def to_wire(self, name: str) -> str:
        """The name sent upstream (a name outside the map is sanitised the same way)."""
        return self._wire.get(name) or ToolNames([name]).to_wire(name)

    def to_catalog(self, wire: str) -> str:
        """The catalog name for a name the model produced; unknown names pass unchanged
        (the runtime refuses a tool the agent was not offered)."""
        return self._catalog.get(wire, wire)

    @property
    def renamed(self) -> dict[str, str]:
        """Catalog -> wire for the names that changed."""
        return {n: w for n, w in self._wire.items() if n != w}
