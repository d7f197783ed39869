"""Rules for allow-listed readers whose options run a program or destroy a directory.

``man``, ``less``, ``rg``, ``bat``, ``sort``, ``fd``, ``pytest`` and ``go test`` read files
in their everyday use and are on the read-only allow-list for it. Some options hand them a
program to run (``man -P cmd``, ``rg --pre cmd``, ``less +!cmd``, ``fd -x cmd``, ``go test
-exec cmd``): dangerous, or judged as the nested command it is (``fd -x``). Others read a
configuration that may name such a program (``man -C``, ``less -k``) or write files
(``less -o``, ``pytest --junitxml``): risky. The tables also hold the database clients'
pager and output options (``psql --pager``, ``mysql --tee``); ``command_data`` judges
their queries. ``pytest --basetemp dir`` empties ``dir``.
"""

from __future__ import annotations

import re

from services.hitl.command_options import (
    Context,
    Invocation,
    Rule,
    command_until,
    given,
    option_value,
)

__all__ = ["MODULE_RULES", "READER_RULES"]

# Options whose value is a program the reader runs (a pager, a preprocessor, a wrapper).
_PROGRAM_OPTIONS: dict[str, frozenset[str]] = {
    "man": frozenset({"-P", "--pager", "-H", "--html"}),
    "rg": frozenset({"--pre"}),
    "bat": frozenset({"--pager"}),
    "ag": frozenset({"--pager"}),
    "ack": frozenset({"--pager"}),
    "sort": frozenset({"--compress-program"}),
    "go": frozenset({"-exec", "--exec", "-toolexec", "--toolexec", "-vettool", "--vettool"}),
    **dict.fromkeys(("psql", "mysql", "mariadb", "clickhouse-client"), frozenset({"--pager"})),
}
# Options naming a file whose contents may set such a program (man_db.conf's pager, a
# lesskey file's LESSOPEN).
_CONFIG_OPTIONS: dict[str, frozenset[str]] = {
    "man": frozenset({"-C", "--config-file"}),
    "less": frozenset({"-k", "--lesskey-file", "--lesskey-src", "--lesskey-content"}),
}
# Options whose value is a file the reader writes (a log, a report).
_OUTPUT_OPTIONS: dict[str, frozenset[str]] = {
    "less": frozenset({"-o", "-O", "--log-file", "--LOG-FILE"}),
    "pytest": frozenset({"--junitxml", "--junit-xml", "--resultlog"}),
    "mypy": frozenset({"--junit-xml"}),
    "flake8": frozenset({"--output-file"}),
    "pylint": frozenset({"--output"}),
    "eslint": frozenset({"-o", "--output-file"}),
    "ruff": frozenset({"-o", "--output-file"}),
    "psql": frozenset({"-o", "--output", "-L", "--log-file"}),
    **dict.fromkeys(("mysql", "mariadb", "clickhouse-client"), frozenset({"--tee"})),
}
# less's initial commands (`+cmd`) that only move or search: `+F`, `+G`, `+100`, `+/TODO`.
# A search takes the rest of the word as its pattern, so only a line break can end it.
_LESS_MOVES = re.compile(r"\+\+?(\d*[FGgNnpP%]?|[/?][^\n\r]*)")
_LESS_RUNS = re.compile(r"[!|v]")  # `!cmd` shell, `|m cmd` pipe, `v` editor


def _options(ctx: Context, inv: Invocation, depth: int, key: str = "") -> None:
    """The tables above, for any reader listed in them; ``key`` names the entry when it
    is not the command's own name (``py.test`` is ``pytest``)."""
    key = key or inv.key
    if given(inv.args, _PROGRAM_OPTIONS.get(key, frozenset())):
        ctx.flag("dangerous", f"runs a program given in an option ({key}): {inv.display}")
    if given(inv.args, _CONFIG_OPTIONS.get(key, frozenset())):
        ctx.flag("risky", f"reads a configuration that may run programs ({key}): {inv.display}")
    if given(inv.args, _OUTPUT_OPTIONS.get(key, frozenset())):
        ctx.flag("risky", f"writes a file ({key} output option): {inv.display}")


def _less(ctx: Context, inv: Invocation, depth: int) -> None:
    _options(ctx, inv, depth)
    for arg in inv.args:
        if not arg.startswith("+") or _LESS_MOVES.fullmatch(arg):
            continue
        if _LESS_RUNS.search(arg):
            ctx.flag("dangerous", f"less runs a command (initial command {arg}): {inv.display}")
        else:
            ctx.flag("risky", f"less initial command ({arg}): {inv.display}")


def _fd(ctx: Context, inv: Invocation, depth: int) -> None:
    """``fd -x cmd`` / ``fd -X cmd``: the rest of the line (up to ``;``) is a command."""
    args = inv.args
    for i, arg in enumerate(args):
        if arg in ("-x", "--exec", "-X", "--exec-batch"):
            ctx.argv(command_until(args, i + 1, frozenset({";"})), depth + 1)
        elif arg.startswith(("-x", "-X", "--exec=", "--exec-batch=")):
            ctx.flag("dangerous", f"runs a program given in an option (fd): {inv.display}")


def _pytest(ctx: Context, inv: Invocation, depth: int) -> None:
    _options(ctx, inv, depth, "pytest")
    if option_value(inv.args, frozenset({"--basetemp"})) is not None:
        ctx.flag("dangerous", f"pytest --basetemp empties the directory it names: {inv.display}")


def _mypy(ctx: Context, inv: Invocation, depth: int) -> None:
    _options(ctx, inv, depth)
    if given(inv.args, frozenset({"--install-types"})):
        ctx.flag("risky", f"package install/change (mypy --install-types): {inv.display}")


def _date(ctx: Context, inv: Invocation, depth: int) -> None:
    if given(inv.args, frozenset({"-s", "--set"})):
        ctx.flag("risky", f"system configuration change (date --set): {inv.display}")


def _ss(ctx: Context, inv: Invocation, depth: int) -> None:
    if given(inv.args, frozenset({"-K", "--kill"})):
        ctx.flag("risky", f"terminates connections (ss --kill): {inv.display}")


# `python -m pytest ...` is judged like `pytest ...` (command_code's interpreter rule).
MODULE_RULES: dict[str, Rule] = {"pytest": _pytest, "mypy": _mypy}
READER_RULES: dict[str, Rule] = {
    **dict.fromkeys((*_PROGRAM_OPTIONS, *_CONFIG_OPTIONS, *_OUTPUT_OPTIONS), _options),
    **MODULE_RULES,
    "py.test": _pytest,
    "less": _less,
    "fd": _fd,
    "date": _date,
    "ss": _ss,
}
