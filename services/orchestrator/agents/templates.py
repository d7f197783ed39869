"""Agent templates: seed 003's declarative agents, versioned in Postgres.

The six agents of the spec ship in ``agent_templates.json`` (seed 003's shape, see
template_rules) and are installed at start; a changed definition becomes a new version,
older versions stay readable. Admins add versions through AgentAdmin; ``reload`` makes
this process serve them without a restart, ``refresh`` picks up another replica's
writes. ``tool_policy.allowed: ["*"]`` means every active tool of the catalog.

What the agent loop honours today: the prompt, the allowed tools, file restrictions,
hand-over targets, llm_config, execution_policy and hitl. ``tool_policy.mode/required/
max_tools``, the prompt pack's request templates, ``base_class`` and ``multiagent_meta``
are stored, validated and served (agent search ranks on the metadata) for the runtime
to use; every base class runs the same tool-calling loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.db import Pool
from services.orchestrator.agents.budgets import Budgets
from services.orchestrator.agents.template_rules import (
    ALL_TOOLS,
    DEFAULT_BASE_CLASS,
    EXECUTION_DEFAULTS,
    canonical,
    upgrade,
)
from services.orchestrator.agents.template_store import TemplateRow, TemplateStore
from services.orchestrator.errors import AgentNotFound

log = logging.getLogger(__name__)
BUILTIN_FILE = Path(__file__).parent / "agent_templates.json"
ORCHESTRATOR = "orchestrator"
UNIVERSAL = "universal"
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_OUTPUT_TOKENS = 4_096
# The entry agents: the runtime cannot start a task without them.
PROTECTED = frozenset({ORCHESTRATOR, UNIVERSAL})

__all__ = [
    "ALL_TOOLS",
    "ORCHESTRATOR",
    "PROTECTED",
    "UNIVERSAL",
    "AgentRegistry",
    "AgentTemplate",
    "ToolPolicy",
    "builtin_definitions",
    "install_templates",
]


@dataclass(frozen=True)
class ToolPolicy:
    """Which tools an agent gets and how they are chosen (seed 003 section 2.1)."""

    mode: str = "static"
    """static: the allowed list as is; retrieval: tool search picks per step."""
    allowed: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    """Always offered, whatever retrieval finds (e.g. attempt_completion)."""
    max_tools: int = 0
    """Hard cap on the tools in one prompt; 0: none."""


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
    context_window: int = DEFAULT_CONTEXT_WINDOW
    """Tokens the model reads and writes in one call (llm_config.context_window)."""
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    """Kept free for the answer when the prompt is budgeted (llm_config.max_output_tokens)."""
    send_reasoning: bool = False
    """Send the model's earlier reasoning back to it (llm_config.send_reasoning)."""
    max_iterations: int = EXECUTION_DEFAULTS["max_iterations"]
    max_tool_calls: int = EXECUTION_DEFAULTS["max_tool_calls"]
    max_invalid_arguments: int = EXECUTION_DEFAULTS["max_invalid_arguments"]
    max_turn_tokens: int = 0
    """Tokens (prompt + completion) one turn may spend; 0: no limit."""
    hitl: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Approval policy overrides (always_approve, never_approve, command_allow, command_deny)."""
    base_class: str = DEFAULT_BASE_CLASS
    llm_config: Mapping[str, Any] = field(default_factory=dict)
    execution_policy: Mapping[str, Any] = field(default_factory=dict)
    tool_policy: ToolPolicy = ToolPolicy()
    prompt_pack: Mapping[str, str] = field(default_factory=dict)
    """system_prompt, initial_user_request_template, clarification_response_template."""
    multiagent_meta: Mapping[str, Any] = field(default_factory=dict)
    """capabilities (text) and tags: what agent search ranks on."""
    budgets: Budgets = field(default_factory=Budgets)
    """execution_policy's optional budgets: clarifications, searches, timeouts, stops."""

    @property
    def output_limit(self) -> int | None:
        """``max_tokens`` of each call: llm_config's ``max_tokens``, else its
        ``max_output_tokens`` (so the answer stays within the reserve the budget kept for
        it); None when the template sets neither (the upstream's own limit applies)."""
        reserve = self.llm_config.get("max_output_tokens")
        return self.max_tokens or (int(reserve) if reserve else None)

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any], version: int = 1) -> AgentTemplate:
        """The template of a stored definition (canonical, or the first flat shape)."""
        definition = upgrade(definition)
        prompts = definition.get("prompt_pack", {})
        llm = definition.get("llm_config", {})
        execution = {**EXECUTION_DEFAULTS, **definition.get("execution_policy", {})}
        tools = definition.get("tool_policy", {})
        policy = ToolPolicy(
            mode=tools.get("mode", "static"),
            allowed=tuple(tools.get("allowed", ())),
            required=tuple(tools.get("required", ())),
            max_tools=tools.get("max_tools", 0),
        )
        return cls(
            name=definition["name"],
            version=version,
            display_name=definition.get("display_name") or definition["name"].title(),
            description=definition.get("description", ""),
            system_prompt=prompts.get("system_prompt", ""),
            allowed_tools=policy.allowed,
            file_restrictions=tuple(definition.get("file_restrictions", ())),
            handoff=tuple(definition.get("handoff", ())),
            temperature=llm.get("temperature"),
            max_tokens=llm.get("max_tokens"),
            model=llm.get("model") or "",
            context_window=llm.get("context_window") or DEFAULT_CONTEXT_WINDOW,
            max_output_tokens=llm.get("max_output_tokens")
            or llm.get("max_tokens")
            or DEFAULT_MAX_OUTPUT_TOKENS,
            send_reasoning=bool(llm.get("send_reasoning")),
            max_iterations=execution["max_iterations"],
            max_tool_calls=execution["max_tool_calls"],
            max_invalid_arguments=execution["max_invalid_arguments"],
            max_turn_tokens=execution.get("max_turn_tokens", 0),
            hitl=definition.get("hitl", {}),
            base_class=definition.get("base_class", DEFAULT_BASE_CLASS),
            llm_config=llm,
            execution_policy=execution,
            tool_policy=policy,
            prompt_pack=prompts,
            multiagent_meta=definition.get("multiagent_meta", {}),
            budgets=Budgets.of(execution),
        )

    @classmethod
    def from_row(cls, row: TemplateRow) -> AgentTemplate:
        return cls.from_definition(row.definition, row.version)

    def capability_text(self) -> str:
        """What the agent directory ranks and embeds for this template: its names, tags,
        description, capabilities and system prompt."""
        meta = self.multiagent_meta
        fields = (
            f"{self.name} {self.display_name}",
            " ".join(str(t) for t in meta.get("tags", ())),
            self.description,
            str(meta.get("capabilities", "")),
            self.system_prompt,
        )
        return "\n".join(f for f in fields if f)


def builtin_definitions() -> list[dict[str, Any]]:
    """The shipped agents, in their canonical (stored) form."""
    raw: list[dict[str, Any]] = json.loads(BUILTIN_FILE.read_text())
    return [canonical(definition) for definition in raw]


class AgentRegistry:
    """The templates this process serves (latest active versions).

    In single-agent mode only ``universal`` is served. Hand-over targets that are not
    served (deactivated, or other mode) are dropped, so no agent is offered a switch to
    an agent that is gone.
    """

    def __init__(self, templates: Sequence[AgentTemplate], multi_agent_mode: bool) -> None:
        self.multi_agent_mode = multi_agent_mode
        self._templates: dict[str, AgentTemplate] = {}
        self._versions: dict[tuple[str, int], AgentTemplate] = {}
        self._loaded_at = time.monotonic()
        self.replace(templates)

    def replace(self, templates: Sequence[AgentTemplate]) -> None:
        """Serve ``templates`` from now on (one assignment: readers see old or new, whole)."""
        mode = self.multi_agent_mode
        served = [t for t in templates if mode or t.name == UNIVERSAL]
        names = {t.name for t in served}
        pruned = {
            t.name: dataclasses.replace(t, handoff=tuple(h for h in t.handoff if h in names))
            for t in served
        }
        self._versions.update({(t.name, t.version): t for t in pruned.values()})
        self._templates = pruned
        self._loaded_at = time.monotonic()

    async def reload(self, pool: Pool) -> None:
        """Serve the latest active versions in Postgres (after an admin change)."""
        rows = await TemplateStore(pool).latest()
        self.replace([AgentTemplate.from_row(r) for r in rows])

    async def refresh(self, pool: Pool, max_age: float) -> None:
        """``reload`` when the last load is older than ``max_age`` seconds: how another
        replica's admin change reaches this process."""
        if time.monotonic() - self._loaded_at >= max_age:
            await self.reload(pool)

    def get(self, name: str, version: int | None = None) -> AgentTemplate:
        """The served template, or (``version``) one this process served before."""
        template = (
            self._templates.get(name) if version is None else self._versions.get((name, version))
        )
        if template is None:
            raise AgentNotFound(f"agent {name!r} is not available", agent=name)
        return template

    async def pinned(self, pool: Pool, name: str, version: int) -> AgentTemplate:
        """Exactly ``name`` at ``version`` (a version pinned by a session or an instance)."""
        found = self._versions.get((name, version))
        if found is None:
            found = AgentTemplate.from_row(await TemplateStore(pool).get(name, version))
            self._versions[(name, version)] = found
        return found

    def has(self, name: str) -> bool:
        return name in self._templates

    def all(self) -> list[AgentTemplate]:
        return list(self._templates.values())

    @property
    def entry(self) -> str:
        """Where a new task starts: the orchestrator, or universal in single-agent mode."""
        return ORCHESTRATOR if self.multi_agent_mode else UNIVERSAL


async def install_templates(pool: Pool) -> list[AgentTemplate]:
    """Install the built-in templates (new version when changed); return the latest ones.

    A template whose newest version an admin wrote, or that an admin deactivated, is left
    alone: a restart never undoes an admin's change.
    """
    store = TemplateStore(pool)
    for definition in builtin_definitions():
        row, written = await store.write(definition, "builtin", yield_to_admin=True)
        if row is not None and not written and row.definition != definition:
            log.info("built-in template %s kept at the admin's version %d", row.name, row.version)
    return [AgentTemplate.from_row(r) for r in await store.latest()]
