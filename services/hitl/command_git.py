"""Git rules of the HITL command analyser: history rewrites, discarded work, run commands.

Everyday git (status, diff, log, commit, fetch) passes the read-only allow-list; anything
that can lose commits or uncommitted work, rewrite history (rebase, amend, reset to another
commit), change configuration (``git config``, ``git -c``) or remotes, fetch from a
repository that is not a configured remote, or rewrite a shared remote, needs a human.
Configuration that names a program (``core.pager``, ``alias.x=!cmd``, ``--upload-pack``)
runs it: dangerous.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from services.hitl.command_options import (
    HARMLESS_PROGRAMS,
    Context,
    Invocation,
    before_dashdash,
    given,
    long_flags,
    operands,
    short_flags,
)

# Global options placed before the subcommand that consume the following word.
_GLOBAL_ARG_OPTS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
)


# HEAD~2, main^, a commit id, a remote-tracking branch: reset moves the branch there.
_COMMITISH = re.compile(r"[~^]\d*$|^[0-9a-f]{7,40}$|^(origin|upstream)/")
# An operand that names files rather than a branch: an extension, a glob, `./x`, `dir/`,
# pathspec magic (`:/`, `:(glob)`). Branches rarely look like this; when one does, asking
# is the cheap mistake.
_PATHLIKE = re.compile(r"\.[A-Za-z][\w-]*$|[*?\[]|^\.{1,2}(/|$)|/$|^:")
# Configuration keys whose value is a program git runs (or a file that may set one).
_COMMAND_KEY = re.compile(
    r"^(core\.(pager|editor|sshcommand|fsmonitor|hookspath|askpass|gitproxy|"
    r"alternaterefscommand)|sequence\.editor|diff\.external|pager\..+|credential\.(.+\.)?helper"
    r"|gpg\.(.+\.)?program|(diff|merge|filter)\..+\.(command|textconv|driver|clean|smudge|"
    r"process)|(difftool|mergetool|browser|man|guitool)\..+\.(cmd|path)|web\.browser"
    r"|uploadpack\.packobjectshook|remote\..+\.(uploadpack|receivepack)|protocol\.(.+\.)?allow"
    r"|include\.path|includeif\..+\.path|init\.templatedir|interactive\.difffilter"
    r"|sendemail\.(.+\.)?smtpserver|submodule\..+\.update|instaweb\..+|core\.worktree)$",
    re.IGNORECASE,
)
# Options of fetch, pull, clone and ls-remote naming the program run on the other side.
_UPLOAD_PACK = frozenset({"--upload-pack", "-u", "--exec"})


def config_verdict(key: str, value: str | None) -> str | None:
    """``"dangerous"`` when setting ``key`` (to ``value``) makes git run a program."""
    key = key.strip()
    if key.lower().startswith("alias."):
        return "dangerous" if value is None or value.lstrip().startswith("!") else None
    if not _COMMAND_KEY.match(key):
        return None
    harmless = value is not None and value.strip().lower() in HARMLESS_PROGRAMS
    pager = key.lower().startswith(("core.pager", "pager.", "core.editor", "sequence.editor"))
    return None if harmless and pager else "dangerous"


def _config_change(ctx: Context, setting: str, display: str, *, from_env: bool) -> None:
    """``git -c key=value`` / ``--config-env=key=VAR``: a one-off configuration change."""
    key, eq, value = setting.partition("=")
    if config_verdict(key, None if from_env or not eq else value) is not None:
        ctx.flag("dangerous", f"git configuration runs a program ({key.strip()}): {display}")
    else:
        ctx.flag("risky", f"changes git configuration (-c {key.strip()}): {display}")


def looks_like_path(word: str) -> bool:
    """Whether a git operand names files rather than a branch or a commit."""
    return bool(_PATHLIKE.search(word))


def _push(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    refspecs = operands(args, frozenset({"-o", "--push-option", "--repo", "--receive-pack"}))[1:]
    forced = {"--force", "--force-with-lease", "--force-if-includes", "--mirror"} & longs
    if forced or "f" in flags or any(r.startswith("+") for r in refspecs):
        ctx.flag("dangerous", f"force push rewrites remote history: {display}")
    elif (
        {"--delete", "--prune"} & longs or "d" in flags or any(r.startswith(":") for r in refspecs)
    ):
        ctx.flag("dangerous", f"deletes remote branches: {display}")
    else:  # publishing commits is visible to others and cannot be taken back quietly
        ctx.flag("risky", f"pushes commits to a remote: {display}")


def _clean(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    if "n" in flags or "--dry-run" in longs:
        return
    if flags & {"f", "d", "x", "X"} or "--force" in longs:
        ctx.flag("dangerous", f"git clean deletes untracked files: {display}")
    else:
        ctx.flag("risky", f"git clean: {display}")


def _reset(ctx: Context, args: tuple[str, ...], display: str) -> None:
    # `git reset HEAD x.py` / `git reset x.py` unstage; `git reset main` moves the branch.
    first = operands(before_dashdash(args))[:1]
    moves = bool(first) and first[0] not in ("HEAD", "@") and not looks_like_path(first[0])
    if "--hard" in args:
        ctx.flag("dangerous", f"git reset --hard discards uncommitted changes: {display}")
    elif {"--merge", "--keep"} & set(args):
        ctx.flag("risky", f"git reset may drop changes: {display}")
    elif {"--soft", "--mixed"} & set(args) or moves or any(map(_COMMITISH.search, first)):
        ctx.flag("risky", f"rewrites repository history (reset to a commit): {display}")


def _checkout(ctx: Context, args: tuple[str, ...], display: str) -> None:
    """`git checkout main` switches; `git checkout main app.py`, `git checkout app.py` and
    `git checkout -- .` overwrite files with another version: their changes are lost."""
    options = before_dashdash(args)
    ops = operands(options, frozenset({"-b", "-B", "--orphan", "--conflict"}))
    paths = args[len(options) + 1 :]
    flags, longs = short_flags(args), long_flags(args)
    forced = "f" in flags or "--force" in longs or "--pathspec-from-file" in longs
    if forced or paths or len(ops) > 1 or any(map(looks_like_path, ops)):
        ctx.flag("dangerous", f"git checkout discards uncommitted changes: {display}")
    elif "B" in flags:
        ctx.flag("risky", f"resets a branch (checkout -B): {display}")


def _restore(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    worktree = "W" in flags or "--worktree" in longs
    staged_only = ("S" in flags or "--staged" in longs) and not worktree
    if operands(args, frozenset({"-s", "--source"})) and not staged_only:
        ctx.flag("dangerous", f"git restore discards uncommitted changes: {display}")


def _switch(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if {"--discard-changes", "--force"} & long_flags(args) or "f" in short_flags(args):
        ctx.flag("dangerous", f"git switch discards uncommitted changes: {display}")
    elif "C" in short_flags(args) or "--force-create" in long_flags(args):
        ctx.flag("risky", f"resets a branch (switch -C): {display}")


def _branch(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    deleting = "d" in flags or "--delete" in longs
    if "D" in flags or (deleting and ("f" in flags or "--force" in longs)):
        ctx.flag("dangerous", f"force-deletes a branch: {display}")
    elif deleting:
        ctx.flag("risky", f"deletes a branch: {display}")
    elif {"f", "M", "C"} & flags or "--force" in longs:
        ctx.flag("risky", f"moves or overwrites a branch: {display}")


def _stash(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if args[:1] == ("clear",):
        ctx.flag("dangerous", f"drops every stash: {display}")
    elif args[:1] == ("drop",):
        ctx.flag("risky", f"drops a stash: {display}")


def _history_rewrite(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ctx.flag("dangerous", f"rewrites repository history: {display}")


def _local_rewrite(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ctx.flag("risky", f"rewrites repository history: {display}")


def _commit(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if "--amend" in args:
        _local_rewrite(ctx, args, display)


def _remote_program(ctx: Context, args: tuple[str, ...], display: str) -> None:
    """fetch, pull, clone, ls-remote, archive: options naming a program git runs."""
    if given(args, _UPLOAD_PACK):
        ctx.flag("dangerous", f"git runs a program given in an option (upload-pack): {display}")
    if given(args, frozenset({"-c", "--config", "--template"})):
        ctx.flag("dangerous", f"git configuration runs a program (clone -c): {display}")


def _fetch(ctx: Context, args: tuple[str, ...], display: str) -> None:
    """A configured remote is as trusted as the checkout (changing one asks); a URL or a
    path brings in commits from anywhere."""
    _remote_program(ctx, args, display)
    arg_opts = frozenset({"--depth", "-j", "--jobs", "--shallow-since", "--negotiation-tip"})
    repository = operands(args, arg_opts)[:1]
    if repository and re.search(r"[:/\\@]|^\.", repository[0]):
        ctx.flag("risky", f"fetches from a repository that is not a configured remote: {display}")


def _pull(ctx: Context, args: tuple[str, ...], display: str) -> None:
    _fetch(ctx, args, display)
    if "--rebase" in args or "-r" in args or any(a.startswith("--rebase=") for a in args):
        _local_rewrite(ctx, args, display)


def _grep(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if given(args, frozenset({"-O", "--open-files-in-pager"})):
        ctx.flag("dangerous", f"git grep runs a pager on the files (-O): {display}")


def _reflog(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if args[:1] in (("expire",), ("delete",)):
        _history_rewrite(ctx, args, display)


def _remote(ctx: Context, args: tuple[str, ...], display: str) -> None:
    changes = {"add", "remove", "rm", "rename", "set-url", "set-head", "set-branches", "prune"}
    if set(operands(args)[:1]) & changes:
        ctx.flag("risky", f"changes git remotes: {display}")


def _tag(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if {"d", "f"} & set(short_flags(args)) or {"--delete", "--force"} & long_flags(args):
        ctx.flag("risky", f"deletes or moves a tag: {display}")


def _rm(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ctx.flag("risky", f"removes tracked files: {display}")


_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l"})
_CONFIG_WRITES = frozenset({"--unset", "--unset-all", "--add", "--replace-all", "--edit", "-e"})
_CONFIG_WRITES |= {"--rename-section", "--remove-section"}


def _config(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ops = operands(args, frozenset({"--file", "-f", "--blob", "--type", "--default"}))
    verb = ops[0] if ops and ops[0] in ("get", "list", "set", "unset", "edit") else None
    lone_key = verb is None and len(ops) == 1  # `git config user.name` reads it
    reads = bool(_CONFIG_READS & set(args)) or verb in ("get", "list") or lone_key
    if not reads or _CONFIG_WRITES & set(args):
        keys = ops[1:] if verb == "set" else ops
        value = keys[1] if len(keys) > 1 else None
        unsets = verb == "unset" or bool({"--unset", "--unset-all"} & set(args))
        if keys and not unsets and config_verdict(keys[0], value) is not None:
            ctx.flag("dangerous", f"git configuration runs a program ({keys[0]}): {display}")
        scope = "global " if {"--global", "--system"} & set(args) else ""
        ctx.flag("risky", f"changes {scope}git configuration: {display}")


_SUBCOMMANDS: dict[str, Callable[[Context, tuple[str, ...], str], None]] = {
    "push": _push,
    "clean": _clean,
    "reset": _reset,
    "checkout": _checkout,
    "restore": _restore,
    "switch": _switch,
    "branch": _branch,
    "stash": _stash,
    "filter-branch": _history_rewrite,
    "filter-repo": _history_rewrite,
    "replace": _history_rewrite,
    "update-ref": _history_rewrite,
    "reflog": _reflog,
    "rebase": _local_rewrite,
    "commit": _commit,
    "pull": _pull,
    "fetch": _fetch,
    "clone": _remote_program,
    "ls-remote": _remote_program,
    "archive": _remote_program,
    "grep": _grep,
    "remote": _remote,
    "tag": _tag,
    "rm": _rm,
    "config": _config,
}


def git_rule(ctx: Context, inv: Invocation, depth: int) -> None:
    """Judge ``git [global options] <subcommand> ...``: the one-off configuration
    (``-c``, ``--config-env``, ``--exec-path``), then the subcommand's rule."""
    args, i = inv.args, 0
    while i < len(args) and args[i].startswith("-"):
        arg, value = args[i], args[i + 1] if i + 1 < len(args) else ""
        if arg in ("-c", "--config-env"):
            _config_change(ctx, value, inv.display, from_env=arg != "-c")
        elif arg.startswith("--config-env="):
            _config_change(ctx, arg.split("=", 1)[1], inv.display, from_env=True)
        elif arg.startswith("--exec-path="):
            ctx.flag("dangerous", f"git runs helper programs from another directory: {inv.display}")
        i += 2 if arg in _GLOBAL_ARG_OPTS else 1
    if any(a == "--output" or a.startswith("--output=") for a in args):
        ctx.flag("risky", f"writes a file (--output): {inv.display}")
    if i < len(args) and args[i] in _SUBCOMMANDS:
        _SUBCOMMANDS[args[i]](ctx, args[i + 1 :], inv.display)
