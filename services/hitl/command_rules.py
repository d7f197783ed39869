"""Per-executable risk rules of the HITL command analyser (table-driven, pure).

Each rule receives the unwrapped ``Invocation`` and reports findings through the
``Context``; rules that run nested code (``find -exec``) recurse through it. This module
holds the filesystem, process and system rules, the wrapper tables and the combined
``RULES`` table; code-execution rules live in ``command_code``, git in ``command_git``,
readers whose options run programs in ``command_readers``. A program several tables know
(``sort``: ``-o`` writes, ``--compress-program`` runs) is judged by all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.hitl.command_code import CODE_RULES
from services.hitl.command_data import DATA_RULES
from services.hitl.command_git import git_rule
from services.hitl.command_infra import INFRA_RULES
from services.hitl.command_options import (
    Context,
    Invocation,
    Rule,
    command_until,
    given,
    is_critical,
    is_system_path,
    long_flags,
    norm_path,
    operands,
    option_value,
    option_values,
    short_flags,
)
from services.hitl.command_readers import READER_RULES
from services.hitl.command_shell import SHELL_RULES
from services.hitl.command_writes import WRITE_RULES

__all__ = [
    "PRIVILEGED",
    "RULES",
    "WRAPPERS",
    "Wrapper",
    "env_split_string",
    "skip_wrapper",
    "write_target",
]

_SIMPLE_DANGERS = {
    **dict.fromkeys(("shred", "wipefs", "blkdiscard"), "data wipe"),
    **dict.fromkeys(("mkfs", "mkswap", "format"), "filesystem format"),
    **dict.fromkeys(
        ("fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "diskpart"), "disk partitioning"
    ),
    "truncate": "file truncation",
    **dict.fromkeys(("killall", "pkill", "killall5"), "mass process kill"),
    **dict.fromkeys(("shutdown", "reboot", "halt", "poweroff"), "system power action"),
}
_SYSTEM_CHANGES = frozenset(
    {"mount", "umount", "iptables", "ip6tables", "nft", "ufw", "useradd", "userdel", "usermod"}
    | {"groupadd", "groupdel", "passwd", "chpasswd", "visudo", "sysctl", "modprobe", "insmod"}
    | {"rmmod", "launchctl", "update-alternatives", "ldconfig", "setx", "reg", "chsh", "swapoff"}
)


# Where git finds hooks and configuration: a file placed there runs on the next commit.
_GIT_METADATA = re.compile(r"(^|/)(\.git|\.husky|\.githooks)(/|$)")
# sed's `w file` / `s///w file` write files and `e` / `s///e` run commands.
_SED_WRITE = re.compile(r"(^|[;{}\n])\s*[0-9,$/]*[wWe](\s|$)|/[gpiImM0-9]*[we](\s|;|$)")


def write_target(ctx: Context, target: str, display: str) -> None:
    """Classify a file a command writes (redirection, tee)."""
    path = norm_path(target)
    if path in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty") or path.startswith(
        "/dev/fd/"
    ):
        return
    if path.startswith(("/dev/tcp/", "/dev/udp/")):
        ctx.flag("dangerous", f"network connection through /dev/tcp: {display}")
    elif path.startswith("/dev/"):
        ctx.flag("dangerous", f"overwrites a device: {display}")
    elif is_system_path(target, ctx.system_dirs):
        ctx.flag("dangerous", f"overwrites a system path: {display}")
    else:
        ctx.flag("risky", f"writes a file: {display}")


def _rm(ctx: Context, inv: Invocation, depth: int) -> None:
    flags, longs = set(short_flags(inv.args)), long_flags(inv.args)
    critical = [t for t in operands(inv.args) if is_critical(t, ctx.system_dirs)]
    if "--no-preserve-root" in longs:
        ctx.flag("dangerous", f"delete without root protection: {inv.display}")
    if critical:
        ctx.flag("dangerous", f"delete of a critical path ({critical[0]}): {inv.display}")
    if flags & {"r", "R"} or "--recursive" in longs:
        ctx.flag("dangerous", f"recursive delete: {inv.display}")
    elif "f" in flags or "--force" in longs:
        ctx.flag("dangerous", f"forced delete: {inv.display}")
    else:  # a plain `rm file.txt` is undoable only from VCS: a human should see it
        ctx.flag("risky", f"file deletion: {inv.display}")


def _rmdir(ctx: Context, inv: Invocation, depth: int) -> None:
    windows_recursive = {a.lower() for a in inv.args} & {"/s", "/q"}
    critical = any(is_critical(t, ctx.system_dirs) for t in operands(inv.args))
    if windows_recursive or critical or "p" in short_flags(inv.args):
        ctx.flag("dangerous", f"directory tree removal: {inv.display}")
    else:  # rmdir only removes empty directories
        ctx.flag("risky", f"directory removal: {inv.display}")


def _windows_del(ctx: Context, inv: Invocation, depth: int) -> None:
    forced = {a.lower() for a in inv.args} & {"/s", "/q", "/f", "-recurse", "-force", "-r"}
    ctx.flag("dangerous" if forced else "risky", f"file deletion: {inv.display}")


def _dd(ctx: Context, inv: Invocation, depth: int) -> None:
    if any(a.startswith("of=") for a in inv.args):
        ctx.flag("dangerous", f"raw write with dd: {inv.display}")
    else:
        ctx.flag("risky", f"raw data copy with dd: {inv.display}")


def _permissions(ctx: Context, inv: Invocation, depth: int) -> None:
    if "R" in short_flags(inv.args) or "--recursive" in long_flags(inv.args):
        ctx.flag("dangerous", f"recursive permission change: {inv.display}")
    paths = operands(inv.args)[1:]  # the first operand is the mode or the owner
    if any(is_critical(p, ctx.system_dirs) for p in paths):
        ctx.flag("dangerous", f"permission change on a system path: {inv.display}")
    elif inv.key != "chmod":
        ctx.flag("risky", f"ownership change: {inv.display}")


def _copy_move(ctx: Context, inv: Invocation, depth: int) -> None:
    target_opts = frozenset({"-t", "--target-directory"})
    ops = operands(inv.args, target_opts | {"-S", "--suffix"})
    target = option_value(inv.args, target_opts)
    dest = target if target is not None else (ops[-1] if len(ops) > 1 else None)
    sources = ops if target is not None else ops[:-1]
    if inv.key == "mv" and dest is not None and norm_path(dest) == "/dev/null":
        ctx.flag("dangerous", f"move to /dev/null destroys data: {inv.display}")
    elif dest is not None and is_system_path(dest, ctx.system_dirs):
        ctx.flag("dangerous", f"writes into a system path: {inv.display}")
    if inv.key in ("mv", "rsync") and any(is_critical(s, ctx.system_dirs) for s in sources):
        ctx.flag("dangerous", f"moves a critical path: {inv.display}")
    if inv.key == "rsync" and any(f.startswith("--delete") for f in long_flags(inv.args)):
        ctx.flag("dangerous", f"rsync deletes files: {inv.display}")
    if inv.key in ("cp", "install") and any(norm_path(s) == "/dev/null" for s in sources):
        ctx.flag("dangerous", f"copies /dev/null over a file (empties it): {inv.display}")
    elif dest is not None and _may_overwrite(inv):
        ctx.flag("risky", f"may overwrite an existing file ({inv.key}): {inv.display}")
    if dest is not None and _GIT_METADATA.search(norm_path(dest)):
        ctx.flag("risky", f"writes git hooks or metadata (.git): {inv.display}")
    links = {"s", "l"} & set(short_flags(inv.args)) or {"--link", "--symbolic-link"} & long_flags(
        inv.args
    )
    if inv.key == "ln" or (inv.key == "cp" and links):
        ctx.flag("risky", f"creates a link (writes through it land on its target): {inv.display}")


def _may_overwrite(inv: Invocation) -> bool:
    """cp/mv/install/rsync replace an existing target unless told not to; ln only with -f."""
    flags, longs = set(short_flags(inv.args)), long_flags(inv.args)
    if inv.key == "ln":
        return bool({"f"} & flags or "--force" in longs)
    if inv.key == "rsync":
        return "--ignore-existing" not in longs
    keeps = "n" in flags or "--no-clobber" in longs or "--update=none" in inv.args
    return inv.key == "install" or not keeps


def _create(ctx: Context, inv: Invocation, depth: int) -> None:
    ops = operands(inv.args, frozenset({"-m", "--mode", "-r", "--reference", "-d", "-t"}))
    if any(is_system_path(p, ctx.system_dirs) for p in ops):
        ctx.flag("dangerous", f"writes into a system path: {inv.display}")


def _tee(ctx: Context, inv: Invocation, depth: int) -> None:
    for path in operands(inv.args):
        write_target(ctx, path, inv.display)


def _kill(ctx: Context, inv: Invocation, depth: int) -> None:
    args = list(inv.args)
    if args[:1] in (["-s"], ["-n"]):
        args = args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        args = args[1:]  # the signal
    targets = args[1:] if args[:1] == ["--"] else args
    if {"-1", "1"} & set(targets):
        ctx.flag("dangerous", f"kills every process: {inv.display}")
    else:
        ctx.flag("risky", f"terminates processes: {inv.display}")


def _init(ctx: Context, inv: Invocation, depth: int) -> None:
    if set(inv.args) & {"0", "6", "1", "s", "S"}:
        ctx.flag("dangerous", f"system power action: {inv.display}")


def _systemctl(ctx: Context, inv: Invocation, depth: int) -> None:
    ops = operands(inv.args, frozenset({"-H", "--host", "-M", "--machine", "-t", "--type"}))
    sub = ops[0] if ops else "list-units"
    if sub in ("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "rescue"):
        ctx.flag("dangerous", f"system power action: {inv.display}")
    elif not (sub.startswith(("list", "is-", "show")) or sub in ("status", "cat", "help")):
        ctx.flag("risky", f"service change: {inv.display}")


def _sed(ctx: Context, inv: Invocation, depth: int) -> None:
    if "--in-place" in long_flags(inv.args) or any(re.match(r"-[^-]*i", a) for a in inv.args):
        ctx.flag("risky", f"in-place file edit: {inv.display}")
    scripts = option_values(inv.args, frozenset({"-e", "--expression"}))
    scripts += operands(inv.args, frozenset({"-e", "--expression", "-f", "--file"}))[:1]
    if any(_SED_WRITE.search(script) for script in scripts):
        ctx.flag("risky", f"sed script writes a file or runs a command: {inv.display}")
    if given(inv.args, frozenset({"-f", "--file"})):
        ctx.flag("risky", f"sed script from a file (unread): {inv.display}")


def _find(ctx: Context, inv: Invocation, depth: int) -> None:
    args = inv.args
    if "-delete" in args:
        ctx.flag("dangerous", f"find -delete removes files: {inv.display}")
    if {"-fprint", "-fprint0", "-fprintf", "-fls"} & set(args):
        ctx.flag("risky", f"writes a file (find -fprint): {inv.display}")
    for i, arg in enumerate(args):
        if arg in ("-exec", "-execdir", "-ok", "-okdir"):
            ctx.argv(command_until(args, i + 1, frozenset({";", "+"})), depth + 1)


def _crontab(ctx: Context, inv: Invocation, depth: int) -> None:
    dangerous = "r" in short_flags(inv.args)
    ctx.flag("dangerous" if dangerous else "risky", f"scheduled job change: {inv.display}")


def _simple_danger(ctx: Context, inv: Invocation, depth: int) -> None:
    ctx.flag("dangerous", f"{_SIMPLE_DANGERS[inv.key]}: {inv.display}")


def _system_change(ctx: Context, inv: Invocation, depth: int) -> None:
    ctx.flag("risky", f"system configuration change: {inv.display}")


def _chain(first: Rule, second: Rule) -> Rule:
    def both(ctx: Context, inv: Invocation, depth: int) -> None:
        first(ctx, inv, depth)
        second(ctx, inv, depth)

    return both


def _combine(*tables: dict[str, Rule]) -> dict[str, Rule]:
    """One rule per program; a program several tables know (``sort``: writes and runs a
    compressor) gets all of them, in order."""
    combined: dict[str, Rule] = {}
    for table in tables:
        for key, rule in table.items():
            combined[key] = _chain(combined[key], rule) if key in combined else rule
    return combined


def _build_rules() -> dict[str, Rule]:
    rules: dict[str, Rule] = {
        "rm": _rm,
        "rmdir": _rmdir,
        "rd": _rmdir,
        "del": _windows_del,
        "erase": _windows_del,
        "remove-item": _windows_del,
        "dd": _dd,
        "tee": _tee,
        "kill": _kill,
        "init": _init,
        "telinit": _init,
        "systemctl": _systemctl,
        "sed": _sed,
        "find": _find,
        "crontab": _crontab,
        "git": git_rule,
    }
    groups: list[tuple[Rule, frozenset[str] | dict[str, str]]] = [
        (_permissions, frozenset({"chmod", "chown", "chgrp"})),
        (_create, frozenset({"mkdir", "touch"})),
        (_copy_move, frozenset({"mv", "cp", "install", "ln", "rsync"})),
        (_simple_danger, _SIMPLE_DANGERS),
        (_system_change, _SYSTEM_CHANGES),
    ]
    for rule, names in groups:
        rules.update(dict.fromkeys(names, rule))
    # Order sets the order of equally ranked reasons: a database client's pager/output
    # options (READER_RULES) are reported before its query (DATA_RULES).
    tables = (CODE_RULES, INFRA_RULES, SHELL_RULES, WRITE_RULES, READER_RULES, DATA_RULES)
    return _combine(*tables, rules)


RULES: dict[str, Rule] = _build_rules()


# --- wrappers: commands whose real work is running the command that follows them -------


@dataclass(frozen=True)
class Wrapper:
    """How to find the command a wrapper (``nice -n 5 cmd``) runs."""

    arg_opts: frozenset[str] = frozenset()
    positional: int = 0  # words after the options that precede the command (timeout 5)


WRAPPERS: dict[str, Wrapper] = {
    **dict.fromkeys(("nohup", "builtin", "command", "unbuffer", "busybox", "setsid"), Wrapper()),
    "env": Wrapper(frozenset({"-u", "--unset", "-C", "--chdir"})),
    "time": Wrapper(frozenset({"-f", "--format", "-o", "--output"})),
    "nice": Wrapper(frozenset({"-n", "--adjustment"})),
    "ionice": Wrapper(frozenset({"-c", "--class", "-n", "--classdata"})),
    "timeout": Wrapper(frozenset({"-s", "--signal", "-k", "--kill-after"}), positional=1),
    "exec": Wrapper(frozenset({"-a"})),
    "xargs": Wrapper(frozenset({"-I", "-n", "-P", "-d", "-E", "-L", "-s", "-a", "--arg-file"})),
    "stdbuf": Wrapper(frozenset({"-i", "-o", "-e"})),
    "watch": Wrapper(frozenset({"-n", "--interval"})),
    "chroot": Wrapper(positional=1),
    "taskset": Wrapper(positional=1),
    **dict.fromkeys(("strace", "ltrace"), Wrapper(frozenset({"-o", "-e", "-p", "-s", "-u"}))),
}
# Privilege escalation is dangerous in itself; the wrapped command is analysed as well.
PRIVILEGED: dict[str, Wrapper] = {
    "sudo": Wrapper(
        frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user"})
        | {"--group", "--chdir", "--prompt", "--host", "--role", "--type", "--other-user"}
    ),
    "doas": Wrapper(frozenset({"-u", "-C"})),
    "pkexec": Wrapper(frozenset({"--user"})),
    "run0": Wrapper(frozenset({"-u", "--user", "-D", "--chdir"})),
    "su": Wrapper(frozenset({"-s", "--shell", "-g", "--group"})),
}


def skip_wrapper(words: list[str], spec: Wrapper) -> list[str]:
    """The words of the wrapped command (options and fixed operands skipped)."""
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            i += 1
            break
        i += 2 if words[i] in spec.arg_opts else 1
    return words[i + spec.positional :]


def env_split_string(words: list[str]) -> str | None:
    """The ``-S``/``--split-string`` value among env's own options, if any."""
    i = 1
    while i < len(words) and (words[i].startswith("-") or "=" in words[i]):
        word = words[i]
        if word in ("-S", "--split-string"):
            return words[i + 1] if i + 1 < len(words) else ""
        if word.startswith(("-S", "--split-string=")):
            return word.split("=", 1)[1] if word.startswith("--") else word[2:]
        i += 2 if word in WRAPPERS["env"].arg_opts else 1
    return None
