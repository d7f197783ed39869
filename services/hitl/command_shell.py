"""Rules on the shell's own state: hijacked environment variables and erased history.

``export PATH=/tmp/evil:$PATH`` makes every later ``ls`` run the attacker's ``ls``;
``LD_PRELOAD=x.so make test`` loads code into everything make starts; ``history -c`` and
``unset HISTFILE`` hide what was done. The shell builtins themselves are on the read-only
allow-list; these rules catch the uses that are not read-only.
"""

from __future__ import annotations

import re

from services.hitl.command_options import (
    HARMLESS_PROGRAMS,
    Context,
    Invocation,
    Rule,
    given,
    operands,
    option_values,
)

__all__ = ["HIJACK_VARS", "LOADER_VARS", "SHELL_RULES", "check_assignment"]

# Pager and editor variables: set to one of HARMLESS_PROGRAMS they start nothing new
# (`GIT_PAGER=cat git log`).
_PROGRAM_VARS = frozenset({"PAGER", "GIT_PAGER", "MANPAGER", "EDITOR", "VISUAL", "GIT_EDITOR"})
# Variables that decide which code runs, for one command (`VAR=x cmd`) or for the session
# (the pagers and editors above among them).
LOADER_VARS = _PROGRAM_VARS | frozenset(
    {"PATH", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES"}
    | {"DYLD_LIBRARY_PATH", "BASH_ENV", "ENV", "PROMPT_COMMAND", "GIT_SSH", "GIT_SSH_COMMAND"}
    | {"GIT_EXEC_PATH", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "PYTHONSTARTUP", "PYTHONHOME"}
    | {"IFS", "HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL", "HISTIGNORE"}
    # git's `-c` in the environment, and the programs git, man and less start
    | {"GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"}
    | {"GIT_DIR", "GIT_TEMPLATE_DIR", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS"}
    | {"GIT_PROXY_COMMAND", "LESSOPEN", "LESSCLOSE", "LESSKEYIN", "RIPGREP_CONFIG_PATH"}
    | {"BROWSER", "GIT_SEQUENCE_EDITOR"}
)
# Set for the whole session, these also redirect code, packages or TLS trust.
HIJACK_VARS = LOADER_VARS | {
    "PYTHONPATH", "NODE_PATH", "PERL5LIB", "RUBYLIB", "HOME", "SHELL", "HTTP_PROXY",
    "HTTPS_PROXY", "ALL_PROXY", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "NPM_CONFIG_REGISTRY",
    "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "NODE_TLS_REJECT_UNAUTHORIZED", "GIT_SSL_NO_VERIFY",
}  # fmt: skip
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
_HISTORY_VARS = frozenset({"HISTFILE", "HISTSIZE", "HISTFILESIZE"})


def check_assignment(ctx: Context, word: str, display: str, *, persistent: bool) -> None:
    """Flag ``NAME=value`` when NAME redirects code (``persistent``: for the session)."""
    match = _NAME.match(word)
    if match is not None:
        _check_variable(ctx, match.group(1), word[match.end() :], display, persistent=persistent)


def _check_variable(
    ctx: Context, name: str, value: str | None, display: str, *, persistent: bool
) -> None:
    """Flag setting ``name`` to ``value``; None is a value nobody can see (``read PAGER``),
    which no pager or editor exemption covers."""
    name = name.upper()
    harmless = value is not None and value.strip("'\"").lower() in HARMLESS_PROGRAMS
    if name in _PROGRAM_VARS and harmless:
        return
    if name in (HIJACK_VARS if persistent else LOADER_VARS):
        if name in _HISTORY_VARS:
            ctx.flag("risky", f"shell history change ({name}): {display}")
        else:
            ctx.flag("risky", f"environment hijack ({name}): {display}")


def _export(ctx: Context, inv: Invocation, depth: int) -> None:
    if "-n" in inv.args and inv.key == "export":
        return  # export -n only un-exports
    for word in inv.args:
        check_assignment(ctx, word, inv.display, persistent=True)


def _unset(ctx: Context, inv: Invocation, depth: int) -> None:
    names = {w.upper() for w in operands(inv.args)}
    if names & (_HISTORY_VARS | {"PATH"}):
        ctx.flag("risky", f"shell history change (unset): {inv.display}")


def _set(ctx: Context, inv: Invocation, depth: int) -> None:
    args = list(inv.args)
    for i, arg in enumerate(args):
        if (arg == "+o" and args[i + 1 : i + 2] == ["history"]) or (
            arg.startswith("+") and ("H" in arg)
        ):
            ctx.flag("risky", f"shell history change (set): {inv.display}")


def _history(ctx: Context, inv: Invocation, depth: int) -> None:
    if any(a.startswith("-") for a in inv.args):  # -c, -d, -w, -a, -r, -s: not a listing
        ctx.flag("risky", f"shell history change (history): {inv.display}")


def _printf_value(args: tuple[str, ...]) -> str | None:
    """What ``printf -v NAME FORMAT [ARG...]`` stores when it is plain to see: a format
    without conversions or escapes, or ``%s`` of one argument; None otherwise."""
    ops = operands(args, frozenset({"-v"}))
    if not ops:
        return None
    fmt, rest = ops[0], ops[1:]
    if "%" not in fmt and "\\" not in fmt:
        return fmt
    return rest[0] if fmt == "%s" and len(rest) == 1 else None


def _sets_variable(ctx: Context, inv: Invocation, depth: int) -> None:
    """``printf -v PATH x`` and ``read PATH <<< x`` assign like ``PATH=x`` does; what
    ``read`` stores comes from its input, unseen."""
    value: str | None = None
    if inv.key == "printf":
        names = option_values(inv.args, frozenset({"-v"}))
        value = _printf_value(inv.args)
    else:
        names = operands(inv.args, frozenset({"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"}))
        names += option_values(inv.args, frozenset({"-a"}))
    for name in names:
        match = _NAME.match(f"{name}=")
        if match is not None:
            _check_variable(ctx, match.group(1), value, inv.display, persistent=True)


def _hash(ctx: Context, inv: Invocation, depth: int) -> None:
    if given(inv.args, frozenset({"-p"})):  # hash -p /tmp/evil ls: `ls` now runs /tmp/evil
        ctx.flag("risky", f"environment hijack (hash -p): {inv.display}")


SHELL_RULES: dict[str, Rule] = {
    "printf": _sets_variable,
    "read": _sets_variable,
    "hash": _hash,
    **dict.fromkeys(("export", "declare", "typeset", "readonly", "local"), _export),
    "unset": _unset,
    "set": _set,
    "history": _history,
}
