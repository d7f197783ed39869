"""Agent templates: prompts, tools, file rules and policies as data in Postgres.

The six agents of the spec ship in ``agent_templates.json`` and are installed at
start; a changed definition becomes a new version, older versions stay readable.
``allowed_tools: ["*"]`` means every active tool of the catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.db import Pool
from services.common.errors import NotFound
from services.common.sql import load_queries

BUILTIN_FILE = Path(__file__).parent / "agent_templates.json"
QUERIES = load_queries(Path(__file__).parent / "sql" / "queries.sql")
ORCHESTRATOR = "orchestrator"
UNIVERSAL = "universal"
ALL_TOOLS = "*"


class AgentNotFound(NotFound):
    """No such agent template (or it is not served in this mode)."""

    code = "AGENT_NOT_FOUND"


@dataclass(frozen=True)
class AgentTemplate:
    """One version of an agent template."""

    name: str
    version: int
    display_name: str
    description: str
    system_prompt: str
    allowed_tools: tuple[str, ...]
    """Tool names, or ``*`` for every catalog tool."""
    file_restrictions: tuple[str, ...] = ()
    """Regexes a written path must match (empty: any workspace path)."""
    handoff: tuple[str, ...] = ()
    """Agents this one may hand the task to (offered as the switch_agent tool)."""
    temperature: float | None = None
    max_tokens: int | None = None
    model: str = ""
    max_iterations: int = 25
    max_tool_calls: int = 50
    max_invalid_arguments: int = 3
    hitl: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Approval policy overrides (always_approve, never_approve, command_allow, command_deny)."""

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any], version: int = 1) -> AgentTemplate:
        llm = definition.get("llm", {})
        execution = definition.get("execution", {})
        return cls(
            name=definition["name"],
            version=version,
            display_name=definition.get("display_name", definition["name"].title()),
            description=definition.get("description", ""),
            system_prompt=definition["system_prompt"],
            allowed_tools=tuple(definition["allowed_tools"]),
            file_restrictions=tuple(definition.get("file_restrictions", ())),
            handoff=tuple(definition.get("handoff", ())),
            temperature=llm.get("temperature"),
            max_tokens=llm.get("max_tokens"),
            model=llm.get("model", ""),
            max_iterations=execution.get("max_iterations", cls.max_iterations),
            max_tool_calls=execution.get("max_tool_calls", cls.max_tool_calls),
            max_invalid_arguments=execution.get("max_invalid_arguments", cls.max_invalid_arguments),
            hitl=definition.get("hitl", {}),
        )


def builtin_definitions() -> list[dict[str, Any]]:
    definitions: list[dict[str, Any]] = json.loads(BUILTIN_FILE.read_text())
    return definitions


class AgentRegistry:
    """The templates this process serves (latest active versions)."""

    def __init__(self, templates: Sequence[AgentTemplate], multi_agent_mode: bool) -> None:
        self.multi_agent_mode = multi_agent_mode
        served = templates if multi_agent_mode else [t for t in templates if t.name == UNIVERSAL]
        self._templates = {t.name: t for t in served}

    def get(self, name: str) -> AgentTemplate:
        template = self._templates.get(name)
        if template is None:
            raise AgentNotFound(f"agent {name!r} is not available", agent=name)
        return template

    def has(self, name: str) -> bool:
        return name in self._templates

    def all(self) -> list[AgentTemplate]:
        return list(self._templates.values())

    @property
    def entry(self) -> str:
        """Where a new task starts: the orchestrator, or universal in single-agent mode."""
        return ORCHESTRATOR if self.multi_agent_mode else UNIVERSAL


async def install_templates(pool: Pool) -> list[AgentTemplate]:
    """Install the built-in templates (new version when changed); return the latest ones."""
    async with pool.acquire() as conn, conn.transaction():
        for definition in builtin_definitions():
            await conn.execute(QUERIES["upsert_template"], definition["name"], definition)
        rows = await conn.fetch(QUERIES["latest_templates"])
    return [AgentTemplate.from_definition(r["definition"], r["version"]) for r in rows]
