"""The tool catalog's domain: tool definitions, their validation, search texts and filters.

Seed 003 section 4: a tool has a type (system/aux/domain/meta), a category, a short
LLM-facing description and a long one, a JSON schema, a risk level and
active/deprecated flags; every change is a new version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.toolsearch.errors import InvalidSearch, InvalidTool

BUILTIN_FILE = Path(__file__).parent / "builtin_tools.json"
TOOL_TYPES = ("system", "aux", "domain", "meta")
RISK_LEVELS = ("low", "medium", "high")
# Who runs a tool's calls: the IDE, the runtime's own tools (system, plan), pure local
# functions, a remote endpoint, or an MCP server (tool sources).
EXECUTORS = ("ide", "system", "plan", "local", "remote", "mcp")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,127}$")
_ENDPOINT = re.compile(r"^https?://[^\s/?#]+[^\s]*$")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[_.\-/]+")


@dataclass(frozen=True)
class ToolDraft:
    """A tool definition as submitted: everything that makes a version, but no version."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    executor: str = "remote"
    type: str = "domain"
    category: str = ""
    tags: tuple[str, ...] = ()
    risk: str = "low"
    long_description: str = ""
    deprecated: bool = False
    active: bool = True
    timeout_seconds: int = 0
    """Seconds the IDE may take to answer (0: the runtime's default)."""
    remote_endpoint: str = ""
    """executor remote: the http(s) URL a call's arguments are POSTed to."""


@dataclass(frozen=True)
class Tool:
    """One stored version of a tool."""

    name: str
    version: int
    description: str
    parameters: Mapping[str, Any]
    executor: str
    tags: tuple[str, ...]
    active: bool = True
    type: str = "domain"
    category: str = ""
    risk: str = "low"
    long_description: str = ""
    deprecated: bool = False
    timeout_seconds: int = 0
    remote_endpoint: str = ""

    @property
    def definition(self) -> ToolDraft:
        """The version's definition, comparable with a submitted draft."""
        return ToolDraft(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            executor=self.executor,
            type=self.type,
            category=self.category,
            tags=self.tags,
            risk=self.risk,
            long_description=self.long_description,
            deprecated=self.deprecated,
            active=self.active,
            timeout_seconds=self.timeout_seconds,
            remote_endpoint=self.remote_endpoint,
        )


def make_draft(raw: Mapping[str, Any]) -> ToolDraft:
    """Validate one definition (builtin JSON or an UpsertTools entry); raise InvalidTool."""
    name = str(raw.get("name", "")).strip()
    if not _NAME.match(name):
        raise InvalidTool(f"bad tool name {name!r}", tool=name)
    description = str(raw.get("description", "")).strip()
    if not description:
        raise InvalidTool(f"{name}: description must not be empty", tool=name)
    parameters = raw.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise InvalidTool(f"{name}: parameters must be a JSON object", tool=name)
    executor = str(raw.get("executor") or "remote")
    tool_type = str(raw.get("type") or "domain")
    risk = str(raw.get("risk") or "low")
    for key, value, allowed in (
        ("executor", executor, EXECUTORS),
        ("type", tool_type, TOOL_TYPES),
        ("risk", risk, RISK_LEVELS),
    ):
        if value not in allowed:
            raise InvalidTool(f"{name}: {key} must be one of {allowed}, got {value!r}", tool=name)
    timeout = raw.get("timeout_seconds") or 0
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 0 <= timeout <= 86_400:
        raise InvalidTool(f"{name}: timeout_seconds must be 0..86400", tool=name)
    endpoint = str(raw.get("remote_endpoint") or "").strip()
    if endpoint and (executor != "remote" or not _ENDPOINT.match(endpoint)):
        raise InvalidTool(
            f"{name}: remote_endpoint must be an http(s) URL of a remote tool", tool=name
        )
    return ToolDraft(
        name=name,
        description=description,
        parameters=dict(parameters),
        executor=executor,
        type=tool_type,
        category=str(raw.get("category") or "").strip(),
        # Order and duplicates of tags carry no meaning: normalise so they never make a version.
        tags=tuple(sorted({str(t).strip() for t in raw.get("tags") or () if str(t).strip()})),
        risk=risk,
        long_description=str(raw.get("long_description") or "").strip(),
        deprecated=bool(raw.get("deprecated", False)),
        active=bool(raw.get("active", True)),
        timeout_seconds=timeout,
        remote_endpoint=endpoint,
    )


def builtin_drafts() -> list[ToolDraft]:
    """The tools of the spec, as shipped."""
    raw: list[dict[str, Any]] = json.loads(BUILTIN_FILE.read_text())
    return [make_draft(item) for item in raw]


def split_identifier(name: str) -> str:
    """``getHealthWorkforce`` / ``git.diff`` / ``read_file`` -> words a query would use."""
    return _SEPARATORS.sub(" ", _CAMEL.sub(r"\1 \2", name)).strip()


def _parameter_texts(parameters: Mapping[str, Any]) -> Iterable[str]:
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return
    for key, schema in properties.items():
        described = schema.get("description", "") if isinstance(schema, Mapping) else ""
        yield f"{split_identifier(str(key))} {described}"


def lexical_text(tool: Tool | ToolDraft) -> str:
    """What BM25 indexes: parameter names and descriptions add much evidence (measured)."""
    parts = [split_identifier(tool.name), tool.description, tool.long_description]
    parts += [split_identifier(tool.category), " ".join(tool.tags)]
    parts += _parameter_texts(tool.parameters)
    return " ".join(p for p in parts if p)


def dense_text(tool: Tool | ToolDraft) -> str:
    """What gets embedded: name and short description. Adding parameters cost 4x the time
    and fused no better on Seal-Tools; BM25 already covers the parameters."""
    return f"{split_identifier(tool.name)}: {tool.description}"


def _words(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.strip() for v in values if v.strip())


@dataclass(frozen=True)
class SearchFilters:
    """Which tools a search may return (seed 003 section 5.3, step 4)."""

    types: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    allowed: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    max_risk: str = ""
    include_deprecated: bool = False
    _category_keys: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = self.types - set(TOOL_TYPES)
        if unknown:
            raise InvalidSearch(f"unknown tool types {sorted(unknown)}; use {TOOL_TYPES}")
        if self.max_risk and self.max_risk not in RISK_LEVELS:
            raise InvalidSearch(f"max_risk must be one of {RISK_LEVELS}")
        keys = tuple(sorted(c.casefold() for c in self.categories))
        object.__setattr__(self, "_category_keys", keys)

    @classmethod
    def build(
        cls,
        *,
        types: Sequence[str] = (),
        categories: Sequence[str] = (),
        allowed: Sequence[str] = (),
        deny: Sequence[str] = (),
        max_risk: str = "",
        include_deprecated: bool = False,
    ) -> SearchFilters:
        """Filters from request lists; blanks are ignored."""
        return cls(
            types=_words(types),
            categories=_words(categories),
            allowed=_words(allowed),
            deny=_words(deny),
            max_risk=max_risk.strip().lower(),
            include_deprecated=include_deprecated,
        )

    def admits(self, tool: Tool) -> bool:
        """True when ``tool`` may be offered; inactive versions never are."""
        if not tool.active or tool.name in self.deny:
            return False
        if tool.deprecated and not self.include_deprecated:
            return False
        if self.allowed and tool.name not in self.allowed:
            return False
        if self.types and tool.type not in self.types:
            return False
        if self.max_risk and RISK_LEVELS.index(tool.risk) > RISK_LEVELS.index(self.max_risk):
            return False
        if self._category_keys:
            # "Finance" admits "Finance/Banking": categories are paths.
            own = tool.category.casefold()
            return any(own == c or own.startswith(c + "/") for c in self._category_keys)
        return True
