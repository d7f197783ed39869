"""A tool source: an MCP server whose tools join the catalog as ``<source>.<tool>``.

A definition is data an admin posts (``POST /admin/tool-sources``) and Postgres keeps.
Secrets never reach Postgres: an ``env`` or ``headers`` value may name them as
``${NAME}``, resolved when the orchestrator connects from its ``TOOL_SECRET_<NAME>``
environment variables (and only those, so a source cannot read the runtime's own keys).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from services.common.errors import InvalidInput

TRANSPORTS = ("stdio", "streamable-http")
RISKS = ("low", "medium", "high")
SOURCE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_TOOL_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")
_SECRET = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A value shown as is: one reference, behind an auth scheme at most ("Bearer ${TOKEN}").
_SHOWN = re.compile(r"^(?:[A-Za-z-]+ )?\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
REDACTED = "***"
DEFAULT_TIMEOUT = 30
DEFAULT_OUTPUT_CHARS = 16_000


class InvalidSource(InvalidInput):
    """A tool source definition the runtime cannot use."""


class MissingSecret(InvalidInput):
    """A ``${NAME}`` the orchestrator has no ``TOOL_SECRET_<NAME>`` for."""


@dataclass(frozen=True)
class ToolSource:
    """One registered MCP server and the rules for its tools."""

    name: str
    transport: str
    """stdio | streamable-http"""
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    """stdio: extra environment of the server process (values may be ``${NAME}``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """streamable-http: request headers (values may be ``${NAME}``)."""
    allowed_tools: tuple[str, ...] = ()
    """The server's tool names (globs allowed) that join the catalog; empty: all."""
    risk: str = "medium"
    """hitl's risk of every tool of the source: low runs unasked, medium and high ask."""
    tool_risks: Mapping[str, str] = field(default_factory=dict)
    """Per-tool overrides of ``risk`` (the server's tool names)."""
    timeout_seconds: int = DEFAULT_TIMEOUT
    """Seconds one call may take before the model is told it timed out."""
    max_output_chars: int = DEFAULT_OUTPUT_CHARS
    """A longer result is cut to this many characters."""

    def admits(self, tool: str) -> bool:
        """True when the server's tool ``tool`` joins the catalog."""
        return not self.allowed_tools or any(
            fnmatch.fnmatchcase(tool, pattern) for pattern in self.allowed_tools
        )

    def risk_of(self, tool: str) -> str:
        return self.tool_risks.get(tool, self.risk)

    def catalog_name(self, tool: str) -> str:
        """``<source>.<tool>``, with characters the catalog refuses replaced by ``_``."""
        return f"{self.name}.{_TOOL_CHAR.sub('_', tool)}"[:128]

    @property
    def prefix(self) -> str:
        return self.name + "."

    def as_json(self, redact: bool = True) -> dict[str, Any]:
        """The canonical definition; ``redact``: literal env/header values are hidden
        (``${NAME}`` references, with an auth scheme before, are shown: no secret there)."""

        def shown(values: Mapping[str, str]) -> dict[str, str]:
            if not redact:
                return dict(values)
            return {k: v if _SHOWN.match(v) else REDACTED for k, v in values.items()}

        body: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.transport == "stdio":
            body.update(command=self.command, args=list(self.args), env=shown(self.env))
        else:
            body.update(url=self.url, headers=shown(self.headers))
        body.update(
            allowed_tools=list(self.allowed_tools),
            risk=self.risk,
            tool_risks=dict(self.tool_risks),
            timeout_seconds=self.timeout_seconds,
            max_output_chars=self.max_output_chars,
        )
        return body


@dataclass(frozen=True)
class ToolOutcome:
    """A tool call's result as the model reads it."""

    content: str
    ok: bool


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut: the tool's output cap]"


def resolve_secrets(values: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """``values`` with each ``${NAME}`` replaced by ``secrets[NAME]``; MissingSecret when
    one is not set."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in secrets:
            raise MissingSecret(f"secret {name!r} is not set (TOOL_SECRET_{name})")
        return secrets[name]

    return {k: _SECRET.sub(one, v) for k, v in values.items()}


def _strings(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidSource(f"'{key}' must be a list of strings")
    return tuple(value)


def _mapping(raw: Mapping[str, Any], key: str) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidSource(f"'{key}' must be an object of strings")
    return dict(value)


def _bounded(raw: Mapping[str, Any], key: str, default: int, most: int) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidSource(f"'{key}' must be an integer 1..{most}")
    return value


def parse_source(raw: Any) -> ToolSource:
    """Validate a posted definition; raise InvalidSource naming the bad field."""
    if not isinstance(raw, Mapping):
        raise InvalidSource("a tool source is a JSON object")
    name = raw.get("name")
    if not isinstance(name, str) or not SOURCE_NAME.match(name):
        raise InvalidSource("'name' must be 1-40 of a-z, 0-9, '_' or '-', starting with a letter")
    transport = raw.get("transport", "stdio")
    if transport not in TRANSPORTS:
        raise InvalidSource(f"'transport' must be one of {TRANSPORTS}")
    command, url = raw.get("command", ""), raw.get("url", "")
    if transport == "stdio" and (not isinstance(command, str) or not command.strip()):
        raise InvalidSource("a stdio source needs 'command'")
    if transport == "streamable-http":
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidSource("a streamable-http source needs an http(s) 'url'")
    risk = raw.get("risk", "medium")
    risks = _mapping(raw, "tool_risks")
    for value in (risk, *risks.values()):
        if value not in RISKS:
            raise InvalidSource(f"a risk must be one of {RISKS}, got {value!r}")
    return ToolSource(
        name=name,
        transport=transport,
        command=command if transport == "stdio" else "",
        args=_strings(raw, "args") if transport == "stdio" else (),
        url=url if transport == "streamable-http" else "",
        env=_mapping(raw, "env") if transport == "stdio" else {},
        headers=_mapping(raw, "headers") if transport == "streamable-http" else {},
        allowed_tools=_strings(raw, "allowed_tools"),
        risk=risk,
        tool_risks=risks,
        timeout_seconds=_bounded(raw, "timeout_seconds", DEFAULT_TIMEOUT, 3600),
        max_output_chars=_bounded(raw, "max_output_chars", DEFAULT_OUTPUT_CHARS, 1_000_000),
    )
