"""The read-only allow-list of the command policy: data, matched per simple command.

Unknown means ask: a simple command that no rule objected to still needs a human unless
an entry of this list matches it. The shipped list lives in ``read_only_commands.txt``;
a template's ``hitl.read_only`` replaces it (the entry ``@default`` pulls the shipped one
in). An entry is a program followed by the sub-command words (matched against the first
operands) and options (present anywhere) it must be called with; for ``make`` every target
named must have an entry of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from services.hitl.command_options import Invocation, operands, rule_key

__all__ = ["DEFAULT_ENTRY", "AllowList", "default_allow_list", "shipped_entries"]

DEFAULT_ENTRY = "@default"
SHIPPED_FILE = Path(__file__).with_name("read_only_commands.txt")
# Options placed before a sub-command that consume the next word (`git -C dir status`).
_GLOBAL_ARG_OPTS: dict[str, frozenset[str]] = {
    "git": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}),
    "gh": frozenset({"-R", "--repo"}),
    "make": frozenset({"-C", "-f", "--file", "--directory", "-j", "--jobs", "-l", "-o", "-W"}),
    "npm": frozenset({"--prefix", "-w", "--workspace"}),
    "cargo": frozenset({"--manifest-path", "-p", "--package", "-j", "--jobs"}),
    "python": frozenset({"-W", "-X"}),
}
# Programs whose operands are each a target that must be listed (make test lint).
_EVERY_OPERAND = frozenset({"make"})


@dataclass(frozen=True)
class _Entry:
    text: str
    program: str
    words: tuple[str, ...]
    options: frozenset[str]


def _parse(text: str) -> _Entry:
    program, *rest = text.split()
    return _Entry(
        text=" ".join(text.split()),
        program=rule_key(program),
        words=tuple(w for w in rest if not w.startswith("-")),
        options=frozenset(w for w in rest if w.startswith("-")),
    )


@cache
def shipped_entries() -> tuple[str, ...]:
    """The entries of ``read_only_commands.txt`` (comments and blank lines dropped)."""
    lines = SHIPPED_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


@dataclass(frozen=True)
class AllowList:
    """Entries by program; ``match`` names the entry that lets an invocation through."""

    entries: tuple[str, ...]

    @classmethod
    def of(cls, entries: Iterable[str]) -> AllowList:
        """Entries as a template lists them; ``@default`` stands for the shipped list."""
        expanded: list[str] = []
        for entry in entries:
            if entry.strip() == DEFAULT_ENTRY:
                expanded += shipped_entries()
            elif entry.strip():
                expanded.append(" ".join(entry.split()))
        return cls(tuple(dict.fromkeys(expanded)))

    def match(self, inv: Invocation) -> str | None:
        """The entry allowing ``inv``, or ``None`` when it is not on the list."""
        candidates = _by_program(self.entries).get(inv.key, ())
        if not candidates:
            return None
        ops = operands(inv.args, _GLOBAL_ARG_OPTS.get(inv.key, frozenset()))
        if inv.key in _EVERY_OPERAND:
            return _every_operand(candidates, [o for o in ops if "=" not in o], inv.key)
        present = set(inv.args)
        for entry in candidates:
            if entry.options <= present and tuple(ops[: len(entry.words)]) == entry.words:
                return entry.text
        return None


def _every_operand(candidates: Sequence[_Entry], targets: list[str], program: str) -> str | None:
    allowed = {e.words[0]: e.text for e in candidates if len(e.words) == 1 and not e.options}
    if not targets or any(t not in allowed for t in targets):
        return None
    return " ".join([program, *targets])


@cache
def _by_program(entries: tuple[str, ...]) -> dict[str, tuple[_Entry, ...]]:
    table: dict[str, list[_Entry]] = {}
    for text in entries:
        entry = _parse(text)
        table.setdefault(entry.program, []).append(entry)
    # Longest entries first, so the reason names the most specific one.
    return {k: tuple(sorted(v, key=lambda e: -len(e.words))) for k, v in table.items()}


@cache
def default_allow_list() -> AllowList:
    """The shipped list."""
    return AllowList(shipped_entries())
