"""Risk analysis of a shell command line proposed by the LLM (pure; nothing is executed).

The line is parsed like a shell would (``command_parse``), wrappers such as ``sudo`` or
``xargs`` are peeled off, and every simple command is checked against a table of
per-executable rules (``command_rules``, ``command_code``, ``command_git``,
``command_infra``, ``command_data``, ``command_shell``, ``command_writes``,
``command_readers``). Unknown means
ask: a simple command no rule objected to is safe only when the read-only allow-list
(``allow_list``) has an entry for it. Nested code
(``$(...)``, ``sh -c``, ``eval``, ``find -exec``, here-docs fed to a shell) is analysed
recursively up to ``MAX_DEPTH``. Pipelines and sequences add the cross-command patterns:
``curl | sh``, ``base64 -d | bash``, ``curl -o x && chmod +x x``.

Anything the analyser cannot understand is reported as dangerous (fail safe).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from services.hitl import command_rules as rules
from services.hitl.allow_list import AllowList, default_allow_list
from services.hitl.command_code import (
    DOWNLOADERS,
    LANGS,
    SHELL,
    SHELL_NAMES,
    inline_code,
    is_decoder,
    reads_code_from_stdin,
    saves_download,
)
from services.hitl.command_options import (
    DEFAULT_SYSTEM_DIRS,
    Invocation,
    Level,
    basename,
    operands,
    option_value,
    rule_key,
    scan_lang,
)
from services.hitl.command_parse import (
    OUTPUT_REDIRECTS,
    Redirect,
    SimpleCommand,
    Substitution,
    parse,
    render,
    substitution_ids,
)
from services.hitl.command_shell import check_assignment
from services.hitl.errors import CommandParseError

__all__ = ["DEFAULT_SYSTEM_DIRS", "MAX_DEPTH", "CommandRisk", "Level", "analyse_command"]

MAX_DEPTH = 6  # sh -c "eval \"$(...)\"" rarely nests past 3; deeper is an evasion attempt
MAX_COMMAND_LENGTH = 100_000
_RESERVED = re.compile("[\ue000-\ue1ff]")
_DECODER, _DECODED = "<decoder>", "decoded payload"
_RANK: dict[Level, int] = {"safe": 0, "risky": 1, "dangerous": 2}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
# `:(){ :|:& };:` and renamed variants: a function that pipes itself into itself, backgrounded.
# Possessive name + lookbehind keep the scan linear on long words (no retry per offset).
_FORK_BOMB = re.compile(r"(?<![\w:.-])([\w:.-]++)\s*\(\s*\)\s*\{[^}]{0,200}?\1\s*\|\s*\1\s*&")


@dataclass(frozen=True)
class CommandRisk:
    """Verdict on a command line: ``level`` plus human-readable ``reasons`` (worst first).

    ``commands`` lists every simple command found (nested ones included), normalised,
    so callers can match allow/deny patterns per command instead of on the raw text;
    ``allowed`` the read-only allow-list entries that let commands through.
    """

    level: Level
    reasons: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()

    @property
    def dangerous(self) -> bool:
        return self.level == "dangerous"

    @property
    def safe(self) -> bool:
        return self.level == "safe"


def _quote(word: str) -> str:
    """Light quoting for reasons: readable, not necessarily re-executable."""
    if word and not any(c.isspace() or c in "'\";|&" for c in word):
        return word
    return f'"{word}"' if '"' not in word else shlex.quote(word)


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Analysis:
    """Mutable state of one ``analyse_command`` call; implements ``command_options.Context``."""

    def __init__(self, system_dirs: tuple[str, ...], allow: AllowList) -> None:
        self.system_dirs = system_dirs
        self.allow = allow
        self.allowed: list[str] = []
        self.judged = 0  # findings and nested analyses so far: did a rule look at a call?
        self.subs: list[Substitution] = []
        self.sub_payloads: dict[int, str] = {}
        self.findings: dict[str, Level] = {}
        self.commands: list[str] = []

    def flag(self, level: Level, reason: str) -> None:
        # Reasons travel to the IDE: bound their size, make lone surrogates encodable.
        reason = _shorten(reason, 300).encode("utf-8", "backslashreplace").decode("utf-8")
        self.judged += 1
        if _RANK[level] > _RANK[self.findings.get(reason, "safe")]:
            self.findings[reason] = level

    def payload(self, text: str) -> str | None:
        found = [self.sub_payloads[i] for i in substitution_ids(text) if i in self.sub_payloads]
        return min(found) if found else None  # "download" sorts before "decoded payload"

    def code(self, text: str, depth: int) -> None:
        self.judged += 1
        self._code(text, depth)

    def argv(self, words: Sequence[str], depth: int) -> None:
        self.judged += 1
        inv = self._unwrap(list(words), depth)
        if inv is not None:
            self._invoke(inv, depth)

    def result(self) -> CommandRisk:
        ordered = sorted(self.findings.items(), key=lambda item: -_RANK[item[1]])
        level = ordered[0][1] if ordered else "safe"
        allowed = tuple(dict.fromkeys(self.allowed))
        return CommandRisk(level, tuple(r for r, _ in ordered), tuple(self.commands), allowed)

    def _code(self, text: str, depth: int) -> set[str]:
        """Analyse a command string; returns the executables it runs (nested ones too)."""
        if depth > MAX_DEPTH:
            self.flag("dangerous", "command nesting too deep to analyse")
            return set()
        if _FORK_BOMB.search(text):
            self.flag("dangerous", f"fork bomb: {_shorten(text)}")
        start = len(self.subs)
        try:
            pipelines = parse(text, self.subs)
        except CommandParseError:
            self.flag("dangerous", "command could not be parsed")
            return set()
        seen: set[str] = set()
        for index in range(start, len(self.subs)):
            if self.subs[index].kind != "heredoc":  # here-docs are data unless fed to a shell
                nested = self._code(self.subs[index].code, depth + 1)
                if nested & DOWNLOADERS or _DECODER in nested:
                    self.sub_payloads[index] = "download" if nested & DOWNLOADERS else _DECODED
                seen |= nested
        downloaded = False
        for pipeline in pipelines:
            invocations = [self._unwrap(list(stage.words), depth) for stage in pipeline]
            for stage, inv in zip(pipeline, invocations, strict=True):
                self._record(stage)
                for redirect in stage.redirects:
                    self._redirect(redirect, inv, depth)
                if inv is None:
                    continue
                seen.add(inv.key)
                if is_decoder(inv):
                    seen.add(_DECODER)
                if downloaded and self._executes_file(inv):
                    self.flag("dangerous", f"downloaded file made executable or run: {inv.display}")
                self._invoke(inv, depth)
                to_file = any(r.op in OUTPUT_REDIRECTS for r in stage.redirects)
                downloaded |= saves_download(inv) or (inv.key in DOWNLOADERS and to_file)
            self._pipeline(invocations, depth)
        return seen

    def _record(self, stage: SimpleCommand) -> None:
        words = [render(w, self.subs) for w in stage.words]
        words += [f"{r.op} {render(r.target, self.subs)}" for r in stage.redirects]
        self.commands.append(" ".join(words))

    def _unwrap(self, words: list[str], depth: int) -> Invocation | None:
        """Peel env assignments and wrapper commands off until the real executable; a
        wrapper with nothing to wrap (`env`, `nohup`) is the executable itself."""
        wrapper: list[str] | None = None  # the words of the innermost plain wrapper
        while True:
            assignments = 0
            while assignments < len(words) and _ASSIGNMENT.match(words[assignments]):
                assignments += 1
            shown = _shorten(" ".join(render(w, self.subs) for w in words))
            for word in words[:assignments]:  # bare `PATH=x` lasts for the session
                check_assignment(self, word, shown, persistent=assignments == len(words))
            words = words[assignments:]
            if not words:
                return None if wrapper is None else self._invocation(wrapper)
            name = basename(words[0])
            key = rule_key(name)
            if key in rules.PRIVILEGED:
                self.flag("dangerous", f"privilege escalation: {name}")
                if key == "su":
                    code = option_value(words, frozenset({"-c", "--command"}))
                    if code:
                        self._code(code, depth + 1)
                    return None
            split = rules.env_split_string(words) if key == "env" else None
            if split is not None:  # env -S 'cmd args': the command comes as one string
                self._code(split, depth + 1)
                return None
            if key == "command" and set(words[1:2]) & {"-v", "-V"}:
                return None  # `command -v x` only looks x up
            spec = rules.PRIVILEGED.get(key) or rules.WRAPPERS.get(key)
            if spec is None:
                return self._invocation(words)
            wrapper = words if key in rules.WRAPPERS else None
            words = rules.skip_wrapper(words[1:], spec)

    def _invocation(self, words: list[str]) -> Invocation:
        display = _shorten(" ".join(_quote(render(w, self.subs)) for w in words))
        return Invocation(basename(words[0]), tuple(words[1:]), display, words[0])

    def _invoke(self, inv: Invocation, depth: int) -> None:
        if substitution_ids(inv.argv0) or "$" in inv.argv0:
            payload = self.payload(inv.argv0)
            if payload:
                self.flag("dangerous", f"{payload} executed: {inv.display}")
            else:
                self.flag("risky", f"dynamically computed command: {inv.display}")
            return
        if any("/dev/tcp/" in a or "/dev/udp/" in a for a in inv.args):
            self.flag("dangerous", f"network connection through /dev/tcp: {inv.display}")
        judged = self.judged
        rule = rules.RULES.get(inv.key)
        if rule is not None:
            rule(self, inv, depth)
        if self.judged != judged:
            return  # a rule objected, or judged the code the call runs (sh -c, find -exec)
        entry = self.allow.match(inv)
        if entry is None:
            self.flag("risky", f"not on the read-only allow-list: {inv.display}")
        else:
            self.allowed.append(entry)

    def _redirect(self, redirect: Redirect, inv: Invocation | None, depth: int) -> None:
        target = render(redirect.target, self.subs)
        shown = f"{redirect.op} {target}"
        if redirect.op in OUTPUT_REDIRECTS or (redirect.op == ">&" and not target.isdigit()):
            if target != "-":
                rules.write_target(self, redirect.target, shown)
        elif "/dev/tcp/" in target or "/dev/udp/" in target:
            self.flag("dangerous", f"network connection through /dev/tcp: {shown}")
        if inv is None or redirect.op not in ("<", "<<", "<<<") or not reads_code_from_stdin(inv):
            return
        payload = self.payload(redirect.target)
        if payload:
            self.flag("dangerous", f"{payload} executed: {inv.display} {shown}")
        elif redirect.op != "<":
            ids = substitution_ids(redirect.target) if redirect.op == "<<" else []
            body = self.subs[ids[0]].code if ids else redirect.target
            if inv.key in SHELL_NAMES:
                self._code(body, depth + 1)
            else:
                inline_code(self, inv.key, body, f"{inv.display} {shown}")

    def _pipeline(self, invocations: list[Invocation | None], depth: int) -> None:
        """Cross-stage patterns: something piped into a shell or interpreter reading stdin."""
        download: Invocation | None = None
        decoder: Invocation | None = None
        last: Invocation | None = None
        feeders = 0
        for inv in invocations:  # single pass: pipelines of thousands of stages stay linear
            if inv is None:
                continue
            if last is not None and reads_code_from_stdin(inv):
                self._piped_code(inv, download or decoder or last, feeders == 1, depth)
            download = download or (inv if inv.key in DOWNLOADERS else None)
            decoder = decoder or (inv if is_decoder(inv) else None)
            last, feeders = inv, feeders + 1

    def _piped_code(self, reader: Invocation, source: Invocation, alone: bool, depth: int) -> None:
        kind = "a shell" if reader.key in SHELL_NAMES else "an interpreter"
        shown = f"{source.display} | {reader.display}"
        if source.key in DOWNLOADERS:
            self.flag("dangerous", f"download piped to {kind}: {shown}")
        elif is_decoder(source):
            self.flag("dangerous", f"decoded payload piped to {kind}: {shown}")
        elif alone and source.key in ("echo", "printf"):
            # A literal script: judge the script itself rather than the plumbing.
            literal = " ".join(operands(source.args)).replace("\\n", "\n")
            if reader.key in SHELL_NAMES:
                self.flag("risky", f"commands piped into a shell: {shown}")
                self._code(literal, depth + 1)
            else:
                inline_code(self, reader.key, literal, shown)
        else:
            self.flag("dangerous", f"output of {source.name} piped to {kind}: {shown}")

    @staticmethod
    def _executes_file(inv: Invocation) -> bool:
        if inv.key == "chmod":
            mode = (operands(inv.args) or [""])[0]
            return "x" in mode or bool(re.fullmatch(r"[0-7]*[1357][0-7]*", mode))
        lang = SHELL if inv.key in SHELL_NAMES else LANGS.get(inv.key)
        script = scan_lang(inv.args, lang).script if lang is not None else None
        return "/" in inv.argv0 or script not in (None, "-")


def analyse_command(
    command: str,
    *,
    system_dirs: tuple[str, ...] = DEFAULT_SYSTEM_DIRS,
    allow: AllowList | None = None,
) -> CommandRisk:
    """Classify ``command`` as safe, risky or dangerous, with the reasons why.

    ``system_dirs`` are the directories whose modification is dangerous; ``allow`` the
    read-only allow-list (default: the shipped one). Unparseable or absurdly long/nested
    input is dangerous; an empty command is safe.
    """
    analysis = _Analysis(system_dirs, allow if allow is not None else default_allow_list())
    if len(command) > MAX_COMMAND_LENGTH:
        analysis.flag("dangerous", "command too long to analyse")
    elif _RESERVED.search(command):  # our placeholder characters must not be forgeable
        analysis.flag("dangerous", "command could not be parsed")
    elif command.strip():
        analysis.code(command, 0)
    return analysis.result()
