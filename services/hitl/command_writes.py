"""Rules for read-only programs that can write after all: an option or operand names a file.

``sort -o x``, ``uniq in out``, ``ruff check --fix`` or ``prettier --write`` are on the
read-only allow-list for their everyday use; these rules catch the forms that rewrite
files, so the allow-list never waves them through.
"""

from __future__ import annotations

from services.hitl.command_options import (
    Context,
    Invocation,
    Rule,
    long_flags,
    operands,
    option_value,
    short_flags,
)

__all__ = ["WRITE_RULES"]

# Options that make a formatter or linter rewrite the files it reads.
_FIXERS: dict[str, tuple[frozenset[str], str]] = {
    "ruff": (frozenset({"--fix", "--unsafe-fixes", "--fix-only"}), ""),
    "eslint": (frozenset({"--fix", "--fix-type"}), ""),
    "prettier": (frozenset({"--write"}), "w"),
    "gofmt": (frozenset(), "w"),
    "yq": (frozenset({"--inplace"}), "i"),
}
# Options whose value is a file the program writes.
_OUTPUT_OPTIONS: dict[str, frozenset[str]] = {
    "sort": frozenset({"-o", "--output"}),
    "tree": frozenset({"-o"}),
}


def _fixer(ctx: Context, inv: Invocation, depth: int) -> None:
    longs, short = _FIXERS[inv.key]
    if longs & long_flags(inv.args) or set(short) & set(short_flags(inv.args)):
        ctx.flag("risky", f"rewrites files in place ({inv.key}): {inv.display}")


def _output_option(ctx: Context, inv: Invocation, depth: int) -> None:
    target = option_value(inv.args, _OUTPUT_OPTIONS[inv.key])
    if target is not None:
        ctx.flag("risky", f"writes a file ({inv.key} -o): {inv.display}")


def _second_operand(ctx: Context, inv: Invocation, depth: int) -> None:
    """``uniq in out`` / ``xxd in out``: the second operand is overwritten."""
    if len(operands(inv.args, frozenset({"-f", "-s", "-w", "-c", "-g", "-l", "-o", "-n"}))) > 1:
        ctx.flag("risky", f"writes a file ({inv.key} output operand): {inv.display}")


WRITE_RULES: dict[str, Rule] = {
    **dict.fromkeys(_FIXERS, _fixer),
    **dict.fromkeys(_OUTPUT_OPTIONS, _output_option),
    **dict.fromkeys(("uniq", "xxd"), _second_operand),
}
