"""Git rules of the HITL command analyser: history rewrites and discarded work.

Everyday git (status, diff, log, commit, rebase, fetch) is safe; anything that can lose
commits or uncommitted work, or rewrite a shared remote, needs a human.
"""

from __future__ import annotations

from collections.abc import Callable

from services.hitl.command_options import Context, Invocation, long_flags, operands, short_flags

# Global options placed before the subcommand that consume the following word.
_GLOBAL_ARG_OPTS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
)


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


def _rm(ctx: Context, args: tuple[str, ...], display: str) -> None:
    ctx.flag("risky", f"removes tracked files: {display}")


def _config(ctx: Context, args: tuple[str, ...], display: str) -> None:
    if {"--global", "--system"} & set(args):
        ctx.flag("risky", f"changes global git configuration: {display}")


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
    "rm": _rm,
    "config": _config,
}


def git_rule(ctx: Context, inv: Invocation, depth: int) -> None:
    """Dispatch ``git [global options] <subcommand> ...`` to the subcommand's rule."""
    args, i = inv.args, 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_ARG_OPTS else 1
    if i < len(args) and args[i] in _SUBCOMMANDS:
        _SUBCOMMANDS[args[i]](ctx, args[i + 1 :], inv.display)
