"""HITL command rules for code execution: shells, interpreters, downloads, packages, network.

These are the ways a command line runs code nobody has reviewed: inline ``-c``/``-e`` code,
nested shells, payloads fetched from the network or decoded from base64, packages pulled
from a registry (install scripts run with the user's rights), and remote shells.
"""

from __future__ import annotations

import re

from services.hitl.command_infra import publish_rule
from services.hitl.command_options import (
    Context,
    Invocation,
    Lang,
    Rule,
    given,
    long_flags,
    operands,
    option_value,
    option_values,
    scan_lang,
    short_flags,
)
from services.hitl.command_readers import MODULE_RULES
from services.hitl.command_scan import substitution_ids

__all__ = [
    "CODE_RULES",
    "DOWNLOADERS",
    "LANGS",
    "SHELL",
    "SHELL_NAMES",
    "inline_code",
    "is_decoder",
    "reads_code_from_stdin",
    "saves_download",
]

SHELL = Lang(code_opts="c", arg_opts="oO", stdin_opt="s", code_is_operand=True)
SHELL_NAMES = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh"})
LANGS: dict[str, Lang] = {
    "python": Lang(code_opts="c", arg_opts="WX", module_opt="m"),
    "node": Lang(
        code_opts="ep",
        code_long=frozenset({"--eval", "--print"}),
        arg_opts="r",
        arg_long=frozenset({"--require", "--import", "--loader", "--input-type"}),
    ),
    "bun": Lang(code_opts="ep", code_long=frozenset({"--eval", "--print"})),
    "perl": Lang(code_opts="eE", attached_opts="iIMmlx0"),
    "ruby": Lang(code_opts="e", arg_opts="Ir"),
    "php": Lang(code_opts="r", arg_opts="cdzf"),
    "lua": Lang(code_opts="e", arg_opts="l"),
    "rscript": Lang(code_opts="e"),
    "osascript": Lang(code_opts="e"),
}
DOWNLOADERS = frozenset(
    {"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request"}
    | {"invoke-webrequest", "iwr", "invoke-restmethod", "irm"}
)
# Calls in inline code that delete files or spawn programs; anything else is merely risky.
_DESTRUCTIVE_CODE = re.compile(
    r"\bos\.(remove|unlink|rmdir|removedirs|system|popen|exec\w*|spawn\w*|kill|truncate)\b"
    r"|\bshutil\.(rmtree|move)\b|\brmtree\b|\bsubprocess\b|\bpty\.spawn\b|\b__import__\b"
    r"|\b(eval|exec|system|spawn|execSync|spawnSync|execFile|rmdir)\s*\("
    r"|\b(unlink|rmSync|rmdirSync|unlinkSync|child_process|fs\.rm|FileUtils\.rm\w*|rm_rf)\b"
    r"|\bFile\.delete\b|\bDir\.(rmdir|delete)\b|`[^`]+`|\bqx\s*[({/]"
    r"|\b(Remove-Item|Invoke-Expression|iex|Start-Process|DownloadString)\b",
    re.IGNORECASE,
)
_PACKAGE_SUBCOMMANDS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("pip", "pipenv"), frozenset({"install", "uninstall", "update"})),
    **dict.fromkeys(
        ("npm", "pnpm", "yarn", "bun"),
        frozenset({"install", "i", "add", "ci", "uninstall", "un", "remove", "rm", "update"})
        | {"up", "upgrade", "link", "ln", "publish", "global"},
    ),
    **dict.fromkeys(("uv", "poetry", "pdm"), frozenset({"add", "remove", "install", "sync"})),
    **dict.fromkeys(("conda", "mamba", "micromamba"), frozenset({"install", "remove", "update"})),
    **dict.fromkeys(
        ("apt", "apt-get", "aptitude", "yum", "dnf", "zypper", "brew", "port", "snap", "choco"),
        frozenset({"install", "remove", "purge", "erase", "autoremove", "upgrade", "reinstall"})
        | {"update", "dist-upgrade", "full-upgrade", "uninstall", "in", "rm", "tap", "refresh"},
    ),
    **dict.fromkeys(
        ("winget", "scoop", "flatpak", "gem", "bundle", "cargo"), frozenset({"install"})
    ),
    "go": frozenset({"install", "get"}),
    "apk": frozenset({"add", "del", "upgrade"}),
    "composer": frozenset({"require", "install", "update", "remove", "global"}),
    "pipx": frozenset({"install", "uninstall", "inject", "upgrade", "reinstall"}),
}
_REGISTRY_RUNNERS = frozenset({"npx", "bunx", "uvx", "pnpx"})


def inline_code(ctx: Context, lang: str, code: str, display: str) -> None:
    """Interpreter code given on the command line: dangerous if it deletes or spawns."""
    payload = ctx.payload(code)
    if payload:
        ctx.flag("dangerous", f"inline {lang} code built from a {payload}: {display}")
    elif _DESTRUCTIVE_CODE.search(code):
        ctx.flag("dangerous", f"inline {lang} code with destructive calls: {display}")
    else:
        ctx.flag("risky", f"inline {lang} code can do anything: {display}")


def reads_code_from_stdin(inv: Invocation) -> bool:
    """A shell or interpreter that will execute whatever arrives on stdin."""
    if inv.key in SHELL_NAMES:
        return scan_lang(inv.args, SHELL).reads_stdin
    lang = LANGS.get(inv.key)
    return lang is not None and scan_lang(inv.args, lang).reads_stdin


def is_decoder(inv: Invocation) -> bool:
    """base64 -d, xxd -r, gunzip and friends: turn opaque bytes back into a payload."""
    flags, longs = short_flags(inv.args), long_flags(inv.args)
    if inv.key in ("base64", "base32", "basenc", "gzip", "bzip2", "xz", "zstd", "openssl"):
        return bool({"d", "D"} & set(flags) or {"--decode", "--decompress"} & longs)
    return inv.key in ("uudecode", "gunzip", "zcat", "bzcat", "xzcat", "unxz", "rev") or (
        inv.key == "xxd" and "r" in flags
    )


def saves_download(inv: Invocation) -> bool:
    """curl -o/-O or wget without ``-O -``: the payload lands on disk."""
    if inv.key == "curl":
        out = long_flags(inv.args) & {"--output", "--remote-name", "--remote-name-all"}
        return bool(out or {"o", "O"} & set(short_flags(inv.args)))
    if inv.key == "wget":
        target = option_value(inv.args, frozenset({"-O", "--output-document"}))
        attached = [a[a.index("O") + 1 :] for a in inv.args if re.fullmatch(r"-\w*O.+", a)]
        target = attached[0] if attached else target
        return target not in ("-", "/dev/stdout") and "--spider" not in inv.args
    return inv.key in DOWNLOADERS and "-o" in inv.args


def _shell(ctx: Context, inv: Invocation, depth: int) -> None:
    scan = scan_lang(inv.args, SHELL)
    if scan.code is not None:
        ctx.code(scan.code, depth + 1)
    elif scan.script is not None and substitution_ids(scan.script):
        payload = ctx.payload(scan.script)
        if payload:
            ctx.flag("dangerous", f"{payload} executed by a shell: {inv.display}")
        else:
            ctx.flag("risky", f"shell runs generated code: {inv.display}")


def _interpreter(ctx: Context, inv: Invocation, depth: int) -> None:
    scan = scan_lang(inv.args, LANGS[inv.key])
    if scan.code is not None:
        inline_code(ctx, inv.key, scan.code, inv.display)
    elif scan.module and scan.module[0] in _MODULES:  # python -m pip install x
        module = Invocation(scan.module[0], scan.module[1:], inv.display)
        _MODULES[scan.module[0]](ctx, module, depth)
    elif scan.script is not None and (payload := ctx.payload(scan.script)):
        ctx.flag("dangerous", f"{payload} executed by an interpreter: {inv.display}")
    if inv.key in _PACKAGE_SUBCOMMANDS:  # bun is both a runtime and a package manager
        _package(ctx, inv, depth)


def _powershell(ctx: Context, inv: Invocation, depth: int) -> None:
    for i, arg in enumerate(inv.args):
        opt = arg.lower()
        if opt in ("-e", "-ec") or (opt.startswith("-en") and "-encodedcommand".startswith(opt)):
            ctx.flag("dangerous", f"encoded PowerShell command: {inv.display}")
        elif opt.startswith("-c") and "-command".startswith(opt):
            inline_code(ctx, "powershell", " ".join(inv.args[i + 1 :]), inv.display)


def _cmd(ctx: Context, inv: Invocation, depth: int) -> None:
    switch = next((i for i, a in enumerate(inv.args) if a.lower() in ("/c", "/k")), None)
    if switch is not None:  # cmd /c CODE: the rest of the line is the command
        ctx.code(" ".join(inv.args[switch + 1 :]), depth + 1)


def _deno(ctx: Context, inv: Invocation, depth: int) -> None:
    if inv.args[:1] == ("eval",):
        inline_code(ctx, "deno", " ".join(inv.args[1:]), inv.display)


_AWK_ARG_OPTS = frozenset({"-F", "-v", "-f", "-i", "-l", "-E", "--file", "--include", "--load"})
# system(), `cmd | getline`, `print | "cmd"` or `print | cmd_var`, `|&` co-processes
# (a `|` elsewhere is a regex alternation: `/error|warn/`).
_AWK_RUNS = re.compile(r"\bsystem\s*\(|\|\s*getline|\|&|\bprintf?\b[^;}]*(?<!\|)\|(?!\|)")


def _awk(ctx: Context, inv: Invocation, depth: int) -> None:
    program = " ".join(operands(inv.args, _AWK_ARG_OPTS)[:1])
    includes = option_values(inv.args, frozenset({"-i", "--include"}))
    if any(name.removesuffix(".awk") == "inplace" for name in includes):
        ctx.flag("risky", f"in-place file edit (awk -i inplace): {inv.display}")
    elif includes or given(inv.args, frozenset({"-f", "--file", "-E", "--exec"})):
        ctx.flag("risky", f"awk program from a file (unread): {inv.display}")
    if given(inv.args, frozenset({"-l", "--load"})):
        ctx.flag("risky", f"awk loads a native extension: {inv.display}")
    if _AWK_RUNS.search(program):
        ctx.flag("dangerous", f"awk program runs shell commands: {inv.display}")
    elif re.search(r"\bprintf?\b[^;}]*>", program):
        ctx.flag("risky", f"awk program writes a file: {inv.display}")


def _eval(ctx: Context, inv: Invocation, depth: int) -> None:
    ctx.code(" ".join(inv.args), depth + 1)


def _source(ctx: Context, inv: Invocation, depth: int) -> None:
    payload = next(filter(None, map(ctx.payload, inv.args)), None)
    if payload:
        ctx.flag("dangerous", f"{payload} sourced into the shell: {inv.display}")


def _trap(ctx: Context, inv: Invocation, depth: int) -> None:
    if inv.args and not inv.args[0].startswith("-"):
        ctx.code(inv.args[0], depth + 1)


def _download(ctx: Context, inv: Invocation, depth: int) -> None:
    uploads = any(a.startswith("@") or "=@" in a for a in inv.args)
    if uploads or {"-T", "--upload-file", "--post-file"} & set(inv.args):
        ctx.flag("risky", f"uploads local data: {inv.display}")
    if saves_download(inv):
        ctx.flag("risky", f"download to disk: {inv.display}")


def _netcat(ctx: Context, inv: Invocation, depth: int) -> None:
    execs = {"--exec", "--sh-exec", "--lua-exec"} & long_flags(inv.args)
    socat = inv.key == "socat" and any(re.search(r"\b(exec|system):", a, re.I) for a in inv.args)
    if execs or socat or (inv.key != "socat" and {"e", "c"} & set(short_flags(inv.args))):
        ctx.flag("dangerous", f"remote shell: {inv.display}")
    else:
        ctx.flag("risky", f"raw network connection: {inv.display}")


def _package(ctx: Context, inv: Invocation, depth: int) -> None:
    if publish_rule(ctx, inv, depth):
        return
    ops = operands(inv.args, frozenset({"-C", "--prefix", "-r", "--requirement"}))
    if inv.key in ("uv", "pipx") and ops[:1] in (["pip"], ["tool"]):
        ops = ops[1:]
    sub = ops[0] if ops else ("install" if inv.key == "yarn" else "")
    pacman = inv.key == "pacman" and bool({"S", "R", "U"} & set(short_flags(inv.args)))
    if not pacman and sub not in _PACKAGE_SUBCOMMANDS.get(inv.key, frozenset()):
        return
    scope = {"-g", "--global", "--location=global", "--user", "--system"} & set(inv.args)
    kind = "global package change" if scope or sub == "global" else "package install/change"
    ctx.flag("risky", f"{kind}: {inv.display}")


# `python -m NAME ...` judged like `NAME ...`: pip installs, pytest --basetemp, mypy.
_MODULES: dict[str, Rule] = {"pip": _package, **MODULE_RULES}


def _registry_runner(ctx: Context, inv: Invocation, depth: int) -> None:
    ctx.flag("risky", f"runs a package fetched from a registry: {inv.display}")


def _remote(ctx: Context, inv: Invocation, depth: int) -> None:
    ctx.flag("risky", f"remote connection: {inv.display}")


def _build_code_rules() -> dict[str, Rule]:
    rules: dict[str, Rule] = {
        "powershell": _powershell,
        "pwsh": _powershell,
        "cmd": _cmd,
        "deno": _deno,
        "eval": _eval,
        "source": _source,
        ".": _source,
        "trap": _trap,
        "pacman": _package,
    }
    groups: list[tuple[Rule, frozenset[str] | dict[str, object]]] = [
        (_package, dict(_PACKAGE_SUBCOMMANDS)),
        (_download, DOWNLOADERS),
        (_netcat, frozenset({"nc", "ncat", "netcat", "socat"})),
        (_shell, SHELL_NAMES),
        (_interpreter, dict(LANGS)),
        (_awk, frozenset({"awk", "gawk", "mawk", "nawk"})),
        (_registry_runner, _REGISTRY_RUNNERS),
        (_remote, frozenset({"ssh", "scp", "sftp", "telnet"})),
    ]
    for rule, names in groups:
        rules.update(dict.fromkeys(names, rule))
    return rules


CODE_RULES: dict[str, Rule] = _build_code_rules()
