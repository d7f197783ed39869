"""Shared vocabulary of the HITL command analyser: invocations, option scanning, path tests.

Kept apart from the rule table so the rules (``command_rules``) and the driver
(``command_risk``) both build on it without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from services.common.paths import is_absolute

Level = Literal["safe", "risky", "dangerous"]

DEFAULT_SYSTEM_DIRS: tuple[str, ...] = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/var",
    "/lib",
    "/lib64",
    "/opt",
    "/root",
    "C:\\Windows",
    "C:\\Program Files",
)

# Pagers and editors that start nothing new (`git -c core.pager=cat`, `GIT_PAGER=cat`).
HARMLESS_PROGRAMS = frozenset({"", "cat", "less", "more", "true", "less -r", "less -frx"})

# Targets whose deletion/move wipes far more than the workspace file the user meant.
_CRITICAL = frozenset(
    {"/", "/*", "~", "~/*", "*", ".", "./*", "..", "../*", ".*", "$HOME", "${HOME}", "$HOME/*"}
    | {"/home", "/Users", "c:", "c:/", "c:/*"}
)


@dataclass(frozen=True)
class Invocation:
    """An executable after wrappers (sudo, env, xargs, ...) were peeled off.

    ``args`` may still hold substitution placeholders; ``display`` is readable text.
    """

    name: str
    args: tuple[str, ...]
    display: str
    argv0: str = ""

    @property
    def key(self) -> str:
        return rule_key(self.name)


class Context(Protocol):
    """What a rule may do: record a finding, recurse into nested code, resolve placeholders."""

    system_dirs: tuple[str, ...]

    def flag(self, level: Level, reason: str) -> None: ...

    def code(self, text: str, depth: int) -> None: ...

    def argv(self, words: Sequence[str], depth: int) -> None: ...

    def payload(self, text: str) -> str | None:
        """``"download"``/``"decoded payload"`` when ``text`` embeds such a substitution."""
        ...


Rule = Callable[[Context, Invocation, int], None]


def rule_key(name: str) -> str:
    """Canonical rule name: ``/usr/bin/python3.11`` -> ``python``, ``mkfs.ext4`` -> ``mkfs``."""
    key = name.lower()
    key = key.removesuffix(".exe")
    if key.startswith("mkfs"):
        return "mkfs"
    match = re.fullmatch(r"(python|pypy|pip|perl|ruby|php|node|lua)[\d.]*", key)
    if match:
        return "python" if match.group(1) == "pypy" else match.group(1)
    return "node" if key == "nodejs" else key


def basename(word: str) -> str:
    """``/bin/rm``, ``./rm`` or ``C:\\tools\\rm.exe`` -> ``rm``/``rm.exe`` (the path is ignored)."""
    return word.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or word


def before_dashdash(args: Sequence[str]) -> Sequence[str]:
    """The words before the first ``--`` (all of them when there is none)."""
    return args[: list(args).index("--")] if "--" in args else args


def short_flags(args: Sequence[str]) -> str:
    """Letters of all single-dash clusters before ``--`` (``-rf -v`` -> ``"rfv"``)."""
    return "".join(
        a[1:]
        for a in before_dashdash(args)
        if a.startswith("-") and not a.startswith("--") and not a[1:].isdigit()
    )


def long_flags(args: Sequence[str]) -> set[str]:
    """``--name`` options before ``--`` (values after ``=`` dropped)."""
    return {a.split("=", 1)[0] for a in before_dashdash(args) if a.startswith("--") and a != "--"}


def operands(args: Sequence[str], arg_opts: frozenset[str] = frozenset()) -> list[str]:
    """Non-option words; options listed in ``arg_opts`` consume the following word."""
    out: list[str] = []
    i, options_done = 0, False
    while i < len(args):
        arg = args[i]
        if options_done or arg == "-" or not arg.startswith("-"):
            out.append(arg)
        elif arg == "--":
            options_done = True
        elif arg in arg_opts:
            i += 1
        i += 1
    return out


def command_until(args: Sequence[str], start: int, ends: frozenset[str]) -> Sequence[str]:
    """The command an option runs: ``args[start:]`` up to the first word in ``ends``
    (``find -exec rm {} ;``, ``fd -x rm ;``), or to the end of the line."""
    end = next((j for j in range(start, len(args)) if args[j] in ends), len(args))
    return args[start:end]


def option_values(args: Sequence[str], names: frozenset[str]) -> list[str]:
    """Values of every ``-o VALUE``/``--opt=VALUE`` among ``names`` (``psql -c a -c b``)."""
    values: list[str] = []
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in names:
            values.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    return values


def option_value(args: Sequence[str], names: frozenset[str]) -> str | None:
    """Value of the first ``-o VALUE``/``--opt=VALUE`` among ``names``."""
    values = option_values(args, names)
    return values[0] if values else None


def given(args: Sequence[str], names: frozenset[str]) -> bool:
    """Whether any option in ``names`` is present before ``--``, in any spelling:
    ``--opt``, ``--opt=x``, ``-o``, ``-ox`` (value attached) or ``-ao`` (end of a cluster)."""
    for arg in before_dashdash(args):
        if arg.split("=", 1)[0] in names:  # --opt, --opt=x, -exec (go's long options)
            return True
        short = arg.startswith("-") and not arg.startswith("--") and len(arg) > 1
        if short and (f"-{arg[1]}" in names or f"-{arg[-1]}" in names):
            return True
    return False


@dataclass(frozen=True)
class Lang:
    """Command-line grammar of a shell or interpreter, enough to find its code."""

    code_opts: str = ""  # short options introducing inline code (python -c)
    code_long: frozenset[str] = frozenset()
    arg_opts: str = ""  # short options whose value may be the next word
    attached_opts: str = ""  # short options whose value is the rest of the cluster only
    arg_long: frozenset[str] = frozenset()
    module_opt: str = ""  # python -m: the rest of the line is a module and its arguments
    stdin_opt: str = ""  # sh -s: read commands from stdin even with operands
    code_is_operand: bool = False  # sh -c CODE: -c is a flag, the code the first operand


@dataclass(frozen=True)
class LangScan:
    """Result of ``scan_lang``: at most one of code/module/script is set."""

    code: str | None = None
    module: tuple[str, ...] = field(default=())
    script: str | None = None

    @property
    def reads_stdin(self) -> bool:
        return self.code is None and not self.module and self.script in (None, "-")


def scan_lang(args: Sequence[str], lang: Lang) -> LangScan:
    """getopt-style scan of an interpreter's options, stopping at the script operand."""
    i, code_flag, stdin = 0, False, False

    def following(offset: int) -> str:
        return args[offset] if offset < len(args) else ""

    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in ("-", "+") or not arg.startswith(("-", "+")):
            break
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            if key in lang.code_long:
                return LangScan(code=value if eq else following(i + 1))
            i += 2 if key in lang.arg_long and not eq else 1
            continue
        cluster = arg[1:]
        for j, letter in enumerate(cluster):
            rest = cluster[j + 1 :]
            if letter in lang.code_opts and lang.code_is_operand:
                code_flag = True
            elif letter in lang.code_opts:
                return LangScan(code=rest or following(i + 1))
            elif letter == lang.module_opt:
                return LangScan(module=(rest, *args[i + 1 :]) if rest else tuple(args[i + 1 :]))
            elif letter == lang.stdin_opt:
                stdin = True
            elif letter in lang.attached_opts:
                break
            elif letter in lang.arg_opts:
                i += 0 if rest else 1
                break
        i += 1
    rest_args = args[i:]
    if code_flag:
        return LangScan(code=rest_args[0] if rest_args else "")
    return LangScan(script=None if stdin or not rest_args else rest_args[0])


def norm_path(path: str) -> str:
    """Lower-cased, ``/``-separated, no duplicate or trailing slashes (for comparisons only)."""
    path = re.sub(r"/+", "/", path.replace("\\", "/")).lower()
    return path if path == "/" else path.rstrip("/") or path


def is_system_path(path: str, system_dirs: Sequence[str]) -> bool:
    """True when ``path`` is one of ``system_dirs`` or lies below one."""
    target = norm_path(path)
    if not is_absolute(target):
        return False
    segments = target.split("/")
    if ".." in segments:  # /tmp/../etc: resolve lexically before comparing
        resolved: list[str] = []
        for seg in segments:
            if seg == "..":
                resolved = resolved[:-1] or [""]
            elif seg != ".":
                resolved.append(seg)
        target = "/".join(resolved) or "/"
    return any(target == d or target.startswith(d + "/") for d in map(norm_path, system_dirs))


def is_critical(path: str, system_dirs: Sequence[str]) -> bool:
    """Root, home, the whole workspace (``.``, ``*``) or any system directory."""
    return norm_path(path) in _CRITICAL or is_system_path(path, system_dirs)
