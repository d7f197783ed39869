"""Shell command-line parsing for the HITL command analyser (pure, never executes anything).

A command line becomes a list of pipelines of simple commands. ``command_scan`` first cuts
nested code (``$(...)``, backticks, ``<(...)``, here-doc bodies) out into the shared
``subs`` list, leaving placeholder words; shlex then tokenises the rest and this module
splits it on ``|``, ``&&``, ``||``, ``;``, ``&``, newlines and subshell parentheses.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from services.hitl.command_scan import (
    PUNCT,
    UNHIDE,
    Substitution,
    render,
    rewrite,
    substitution_ids,
)
from services.hitl.errors import CommandParseError

__all__ = [
    "OUTPUT_REDIRECTS",
    "Pipeline",
    "Redirect",
    "SimpleCommand",
    "Substitution",
    "parse",
    "render",
    "substitution_ids",
]


@dataclass(frozen=True)
class Redirect:
    """One redirection such as ``> out.txt`` (``op`` is the operator, ``target`` the word)."""

    op: str
    target: str


@dataclass(frozen=True)
class SimpleCommand:
    """Words of one simple command (assignments and wrappers still included) + redirects."""

    words: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()


Pipeline = tuple[SimpleCommand, ...]

_OPERATORS = sorted(
    ["&>>", "<<<", "&&", "||", ";;", "|&", ">>", "<<", ">&", "<&", ">|", "<>", "&>", *PUNCT],
    key=len,
    reverse=True,
)
_REDIRECTS = frozenset({"&>>", "<<<", ">>", "<<", ">&", "<&", ">|", "<>", "&>", "<", ">"})
OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
# Reserved words that only introduce the real command; `for`/`case` headers run nothing.
_LEADING_KEYWORDS = frozenset({"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done"})
_LEADING_KEYWORDS |= {"while", "until", "esac"}
_HEADER_KEYWORDS = frozenset({"for", "select", "case", "function"})


def _tokenise(text: str) -> list[tuple[str, bool]]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # comments were already removed by the scanner
    try:
        raw = list(lexer)
    except ValueError as exc:
        raise CommandParseError(str(exc)) from exc
    tokens: list[tuple[str, bool]] = []
    for tok in raw:
        if tok and all(c in PUNCT for c in tok):
            while tok:  # shlex glues adjacent operators (`)|`): split greedily
                op = next(o for o in _OPERATORS if tok.startswith(o))
                tokens.append((op, True))
                tok = tok[len(op) :]
        else:
            tokens.append((tok.translate(UNHIDE), False))
    return tokens


def _strip_keywords(words: list[str]) -> list[str]:
    while words and words[0] in _LEADING_KEYWORDS:
        words = words[1:]
    if words and words[0] in _HEADER_KEYWORDS:
        return words[3:] if words[0] == "function" and words[2:3] == ["{"] else []
    return words


def _build(tokens: list[tuple[str, bool]]) -> list[Pipeline]:
    pipelines: list[Pipeline] = []
    stages: list[SimpleCommand] = []
    words: list[str] = []
    redirects: list[Redirect] = []
    pipe_pending = False

    def flush() -> None:
        nonlocal words, redirects
        kept = _strip_keywords(words)
        if kept or redirects:
            stages.append(SimpleCommand(tuple(kept), tuple(redirects)))
        words, redirects = [], []

    def close() -> None:
        flush()
        if stages:
            pipelines.append(tuple(stages))
            stages.clear()

    i = 0
    while i < len(tokens):
        text, is_op = tokens[i]
        if not is_op:
            words.append(text)
            pipe_pending = False
        elif text in _REDIRECTS:
            if i + 1 >= len(tokens) or tokens[i + 1][1]:
                raise CommandParseError(f"redirection {text} without a target")
            redirects.append(Redirect(text, tokens[i + 1][0]))
            i += 1
        elif text in ("|", "|&"):
            flush()
            pipe_pending = True
        elif text == ")" or (text == "(" and pipe_pending):
            flush()  # a subshell continues the pipeline it is part of
        elif text == ";" and pipe_pending and not words:
            pass  # `a |<newline> b`: the newline does not end the pipeline
        else:
            close()
            pipe_pending = False
        i += 1
    close()
    return pipelines


def parse(command: str, subs: list[Substitution]) -> list[Pipeline]:
    """Split ``command`` into pipelines; nested code is appended to ``subs``.

    Raises ``CommandParseError`` for input a shell would reject (unbalanced quotes etc.).
    """
    try:
        return _build(_tokenise(rewrite(command, subs)))
    except RecursionError as exc:  # absurdly deep $( $( ... ) ) nesting
        raise CommandParseError("nesting too deep") from exc
