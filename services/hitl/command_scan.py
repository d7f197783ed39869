"""Quote-aware pre-pass of the HITL command parser (pure, never executes anything).

shlex understands quoting but not the nested code a shell runs. This pass walks the raw
text once, like a POSIX shell would, and rewrites it for shlex:

- ``$(...)``, backticks and ``<(...)``/``>(...)`` are cut out and replaced by placeholder
  words; their code is appended to the shared ``subs`` list for the analyser to recurse into;
- here-document bodies are cut out the same way (analysed only when fed to a shell);
- quoted or escaped operator characters are swapped for private-use stand-ins, because shlex
  drops quoting and ``grep ";"`` would otherwise split into two commands;
- comments are dropped, newlines become ``;``, ``$'...'`` escapes are decoded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from services.hitl.errors import CommandParseError

__all__ = [
    "PUNCT",
    "UNHIDE",
    "Substitution",
    "render",
    "rewrite",
    "substitution_ids",
]


@dataclass(frozen=True)
class Substitution:
    """Code cut out of a command line: ``$(...)``/backticks, ``<(...)`` or a here-doc body."""

    code: str
    kind: Literal["command", "process", "heredoc"]

    def render(self) -> str:
        if self.kind == "heredoc":
            return "EOF"  # shown after its `<<` operator
        return f"$({self.code})" if self.kind == "command" else f"<({self.code})"


PUNCT = "();<>|&"
# Quoted or escaped operator characters are swapped for private-use stand-ins before shlex
# sees them: shlex drops quoting, so `grep ";"` would otherwise split into two commands.
_HIDE = {c: chr(0xE100 + i) for i, c in enumerate(PUNCT)}
UNHIDE = str.maketrans({v: k for k, v in _HIDE.items()})
_SUB_OPEN, _SUB_CLOSE = "\ue000", "\ue001"
_SUB_RE = re.compile(f"{_SUB_OPEN}(\\d+){_SUB_CLOSE}")


_ANSI_ESCAPE = re.compile(r"\\(x[\da-fA-F]{1,2}|u[\da-fA-F]{1,4}|U[\da-fA-F]{1,8}|[0-7]{1,3}|.)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_SIMPLE_ESCAPES |= {"e": "\x1b", "E": "\x1b"}


def _decode_escape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] in "xuU" and len(code) > 1:
        point = int(code[1:], 16)
        # Lone surrogates and out-of-range points could not be encoded into a reply later.
        return chr(point) if point < 0xD800 or 0xDFFF < point <= 0x10FFFF else "\ufffd"
    if code[0] in "01234567":
        return chr(int(code, 8))
    return _SIMPLE_ESCAPES.get(code, code)


def _placeholder(index: int) -> str:
    return f"{_SUB_OPEN}{index}{_SUB_CLOSE}"


def substitution_ids(word: str) -> list[int]:
    """Indices of the substitutions referenced by placeholders inside ``word``."""
    return [int(m) for m in _SUB_RE.findall(word)]


def render(word: str, subs: list[Substitution]) -> str:
    """``word`` with placeholders turned back into readable ``$(...)`` text."""

    def one(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return subs[index].render() if index < len(subs) else "?"

    return _SUB_RE.sub(one, word)


def _skip_backticks(text: str, i: int) -> int:
    """Index of the backtick closing the one at ``i``, or -1."""
    end = text.find("`", i + 1)
    while end > 0 and text[end - 1] == "\\":
        end = text.find("`", end + 1)
    return end


def _find_close(text: str, start: int) -> int:
    """Index of the ``)`` closing a ``$(``/``<(`` whose body starts at ``start``, or -1."""
    depth, quote, i = 0, "", start
    while 0 <= i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif c == "$" and text.startswith("(", i + 1):
            i = _find_close(text, i + 2)  # nested substitution, quoted or not
        elif c == "`":
            i = _skip_backticks(text, i)
        elif quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        if i < 0:
            return -1
        i += 1
    return -1


class _Scanner:
    """Single pass over the raw text that tracks quoting the way a POSIX shell does."""

    def __init__(self, text: str, subs: list[Substitution]) -> None:
        self.text, self.subs = text, subs
        self.out: list[str] = []
        self.heredocs: list[tuple[int, str, bool, bool]] = []  # (index, delim, strip, expand)

    def add_sub(self, code: str, kind: Literal["command", "process", "heredoc"]) -> None:
        self.subs.append(Substitution(code, kind))
        self.out.append(_placeholder(len(self.subs) - 1))

    def run(self, quote: str = "") -> str:
        text, out, i = self.text, self.out, 0
        while i < len(text):
            c, nxt = text[i], text[i + 1 : i + 2]
            if quote == "'":
                quote = "" if c == "'" else quote
                out.append(_HIDE.get(c, c))
            elif c == "\\":
                if nxt != "\n":  # backslash-newline is a line continuation: drop both
                    hidden = _HIDE.get(nxt)
                    out.append(hidden if hidden and not quote else "\\" + _HIDE.get(nxt, nxt))
                i += 1
            elif c == "$" and text.startswith("((", i + 1):
                end = _find_close(text, i + 2)
                if end < 0:
                    raise CommandParseError("unterminated $((")
                out.append("0")  # arithmetic expansion runs no command
                i = end + 1
            elif (c == "$" and nxt == "(") or (c in "<>" and nxt == "(" and not quote):
                end = _find_close(text, i + 2)
                if end < 0:
                    raise CommandParseError(f"unterminated {c}(")
                self.add_sub(text[i + 2 : end], "command" if c == "$" else "process")
                i = end
            elif c == "`":
                end = _skip_backticks(text, i)
                if end < 0:
                    raise CommandParseError("unterminated backtick")
                self.add_sub(text[i + 1 : end].replace("\\`", "`"), "command")
                i = end
            elif c == "$" and nxt and nxt in "'\"" and not quote:
                i = self._dollar_quote(i + 1)
            elif quote:  # double quotes, or a here-doc body where quotes are literal
                quote = "" if c == quote else quote
                out.append(_HIDE.get(c, c))
            elif c in "'\"":
                quote = c
                out.append(c)
            elif c == "#" and (i == 0 or text[i - 1] in " \t\n" + PUNCT):
                end = text.find("\n", i)
                i = (len(text) if end < 0 else end) - 1  # comment runs to end of line
            elif c == "\n":
                i = self._read_heredocs(i + 1) - 1
                out.append(";")
            elif text.startswith("<<<", i):  # here-string: an ordinary redirection
                out.append("<<<")
                i += 2
            elif text.startswith("<<", i):
                i = self._heredoc_operator(i + 2) - 1
            else:
                if c in "<>":
                    self._drop_fd_prefix(i)
                out.append(c)
            i += 1
        if quote in ("'", '"'):
            raise CommandParseError("no closing quotation")
        self._read_heredocs(len(text))
        return "".join(out)

    def _dollar_quote(self, i: int) -> int:
        """``$"..."`` is a plain double quote; ``$'...'`` decodes C escapes (``$'\\x72m'``)."""
        if self.text[i] == '"':
            return i - 1  # drop the `$`; the main loop then enters double-quote mode
        end = i + 1
        while end < len(self.text) and self.text[end] != "'":
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise CommandParseError("no closing quotation")
        decoded = _ANSI_ESCAPE.sub(_decode_escape, self.text[i + 1 : end])
        quoted = "".join("'\"'\"'" if ch == "'" else _HIDE.get(ch, ch) for ch in decoded)
        self.out.append(f"'{quoted}'")
        return end

    def _drop_fd_prefix(self, i: int) -> None:
        # `2>file`: the digits name a file descriptor, not an argument of the command.
        j = i
        while j > 0 and self.text[j - 1].isdigit():
            j -= 1
        if j < i and (j == 0 or self.text[j - 1] in " \t\n" + PUNCT):
            del self.out[len(self.out) - (i - j) :]

    def _heredoc_operator(self, i: int) -> int:
        text = self.text
        strip = text.startswith("-", i)
        i += strip
        while i < len(text) and text[i] in " \t":
            i += 1
        start = i
        while i < len(text) and text[i] not in " \t\n" + PUNCT:
            i += 1
        raw = text[start:i]
        delim = raw.replace("'", "").replace('"', "").replace("\\", "")
        if not delim:
            raise CommandParseError("here-document without delimiter")
        self.out.append("<< ")
        self.add_sub("", "heredoc")  # body is filled in once the line ends
        self.heredocs.append((len(self.subs) - 1, delim, strip, delim == raw))
        return i

    def _read_heredocs(self, i: int) -> int:
        for index, delim, strip, expand in self.heredocs:
            lines: list[str] = []
            while i < len(self.text):
                end = self.text.find("\n", i)
                end = len(self.text) if end < 0 else end
                line, i = self.text[i:end], end + 1
                if (line.lstrip("\t") if strip else line) == delim:
                    break
                lines.append(line)
            body = "\n".join(lines)
            self.subs[index] = Substitution(body, "heredoc")
            if expand:  # an unquoted delimiter means $(...) in the body still runs
                _Scanner(body, self.subs).run(quote="heredoc")
        self.heredocs.clear()
        return min(i, len(self.text))


def rewrite(command: str, subs: list[Substitution]) -> str:
    """``command`` rewritten for shlex; nested code and here-doc bodies go to ``subs``."""
    return _Scanner(command, subs).run()
