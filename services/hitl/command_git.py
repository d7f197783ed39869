"""Git rules of the HITL command analyser: history rewrites and discarded work.

Everyday git (status, diff, log, commit, fetch) passes the read-only allow-list; anything
that can lose commits or uncommitted work, rewrite history (rebase, amend, reset to another
commit), change configuration or remotes, or rewrite a shared remote, needs a human.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from services.hitl.command_options import Context, Invocation, long_flags, operands, short_flags

# Global options placed before the subcommand that consume the following word.
_GLOBAL_ARG_OPTS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
)


# HEAD~2, main^, a commit id, a remote-tracking branch: reset moves the branch there.
_COMMITISH = re.compile(r"[~^]\d*$|^[0-9a-f]{7,40}$|^(origin|upstream)/")


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
    if "--hard" in args:
        ctx.flag("dangerous", f"git reset --hard discards uncommitted changes: {display}")
    elif {"--merge", "--keep"} & set(args):
        ctx.flag("risky", f"git reset may drop changes: {display}")
    elif {"--soft", "--mixed"} & set(args) or any(_COMMITISH.search(o) for o in operands(args)):
        ctx.flag("risky", f"rewrites repository history (reset to a commit): {display}")


def _checkout(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ops = operands(args, frozenset({"-b", "-B", "--orphan"}))
    paths = args[args.index("--") + 1 :] if "--" in args else ()
    forced = "f" in short_flags(args) or "--force" in long_flags(args)
    if forced or paths or "." in ops:
        ctx.flag("dangerous", f"git checkout discards uncommitted changes: {display}")


def _restore(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    worktree = "W" in flags or "--worktree" in longs
    staged_only = ("S" in flags or "--staged" in longs) and not worktree
    if operands(args, frozenset({"-s", "--source"})) and not staged_only:
        ctx.flag("dangerous", f"git restore discards uncommitted changes: {display}")


def _switch(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if {"--discard-changes", "--force"} & long_flags(args) or "f" in short_flags(args):
        ctx.flag("dangerous", f"git switch discards uncommitted changes: {display}")


def _branch(ctx: Context, args: tuple[str, ...], display: str) -> None:
    flags, longs = set(short_flags(args)), long_flags(args)
    deleting = "d" in flags or "--delete" in longs
    if "D" in flags or (deleting and ("f" in flags or "--force" in longs)):
        ctx.flag("dangerous", f"force-deletes a branch: {display}")
    elif deleting:
        ctx.flag("risky", f"deletes a branch: {display}")


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


def _pull(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if "--rebase" in args or "-r" in args or any(a.startswith("--rebase=") for a in args):
        _local_rewrite(ctx, args, display)


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
    "remote": _remote,
    "tag": _tag,
    "rm": _rm,
    "config": _config,
}


def git_rule(ctx: Context, inv: Invocation, depth: int) -> None:
    """Dispatch ``git [global options] <subcommand> ...`` to the subcommand's rule."""
    args, i = inv.args, 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_ARG_OPTS else 1
    if any(a == "--output" or a.startswith("--output=") for a in args):
        ctx.flag("risky", f"writes a file (--output): {inv.display}")
    if i < len(args) and args[i] in _SUBCOMMANDS:
        _SUBCOMMANDS[args[i]](ctx, args[i + 1 :], inv.display)
