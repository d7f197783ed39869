"""The tools an agent is offered: its template's set resolved against the catalog.

The catalog belongs to toolsearch; the orchestrator keeps a copy per process and
refreshes it when it meets a tool it does not know. ``switch_agent`` is a runtime
capability, offered only to templates that may hand over, with their targets as enum.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import ServiceError
from services.common.slices import in_slices
from services.orchestrator.agents.templates import ALL_TOOLS, AgentTemplate
from services.orchestrator.turn.tokens import MESSAGE_OVERHEAD, fixed_text_tokens

log = logging.getLogger(__name__)
SWITCH_AGENT = "switch_agent"
TOOL_SEARCH = "tool_search"
AGENT_SEARCH = "agent_search"
AGENT_TOOL_PREFIX = "agent."
SEARCHES_KEPT = 4096
"""Sessions whose last tool search is kept (see ``Toolbox.for_step``)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model and the validator see it."""

    name: str
    description: str
    parameters: dict[str, Any]
    executor: str
    """ide | system | local | plan | agent | mcp | remote"""
    timeout_seconds: int = 0
    """Seconds the IDE may take to answer (0: the runtime's default)."""
    risk: str = "low"
    """The catalog's risk level (a tool source's rating of its tools)."""
    remote_endpoint: str = ""
    """executor remote: where the runtime POSTs a call's arguments."""

    def as_function(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @functools.cached_property
    def parameters_json(self) -> str:
        """The schema as sent to the model (encoded once per spec, not per model call)."""
        return json.dumps(self.parameters)

    @functools.cached_property
    def prompt_tokens(self) -> int:
        """Estimated tokens of the definition in a prompt (counted once per spec)."""
        # The wrapper ({"type": "function", "function": ...}) costs about two overheads.
        return 2 * MESSAGE_OVERHEAD + fixed_text_tokens(json.dumps(self.as_function()))

    @functools.cached_property
    def schema_chars(self) -> int:
        """Length of the function definition as JSON, for ``schema_tokens``."""
        return len(json.dumps(self.as_function()))


SPECS_KEPT = 256
"""Runtime-made specs kept per distinct input: a step asks for them every time, and a kept
spec keeps its schema's JSON and token count (counted once, not at every model call)."""


@functools.lru_cache(maxsize=SPECS_KEPT)
def switch_agent_spec(targets: tuple[str, ...]) -> ToolSpec:
    return ToolSpec(
        name=SWITCH_AGENT,
        description="Hand the task over to another agent when it is better suited "
        "(for example debug -> coder to implement a fix).",
        parameters={
            "type": "object",
            "properties": {
                "agent_type": {"type": "string", "enum": list(targets)},
                "reason": {"type": "string"},
            },
            "required": ["agent_type", "reason"],
            "additionalProperties": False,
        },
        executor="system",
    )


def agent_tool_spec(template: AgentTemplate) -> ToolSpec:
    """``agent.<name>``: hand a task to that agent in a child session, get its answer back."""
    return _agent_tool_spec(template.name, template.description)


@functools.lru_cache(maxsize=SPECS_KEPT)
def _agent_tool_spec(name: str, description: str) -> ToolSpec:
    return ToolSpec(
        name=AGENT_TOOL_PREFIX + name,
        description=f"Delegate a self-contained task to the {name} agent "
        f"({description}); its final answer comes back as this tool's result.",
        parameters={
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1},
                "context": {"type": "string"},
                "constraints": {"type": "string"},
            },
            "required": ["task"],
            "additionalProperties": False,
        },
        executor="agent",
    )


@functools.lru_cache(maxsize=SPECS_KEPT)
def _search_spec(name: str, description: str) -> ToolSpec:
    """A system tool that takes a query and how many results to return."""
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        executor="system",
    )


def tool_search_spec() -> ToolSpec:
    """The meta tool of retrieval mode: find more tools for the next steps."""
    return _search_spec(
        TOOL_SEARCH,
        "Search the tool catalog when none of the offered tools fits; the tools "
        "found are offered from the next step on.",
    )


def agent_search_spec() -> ToolSpec:
    """The agent directory for agents that delegate: which agent suits a sub-task."""
    return _search_spec(
        AGENT_SEARCH,
        "Search the agent directory for the agents best suited to a task; "
        "delegate to one with its agent.<name> tool.",
    )


def source_prefixes(allowed: Sequence[str]) -> tuple[str, ...]:
    """``<source>.`` of each ``<source>.*`` in an allowed list (``agent.*`` is delegation)."""
    return tuple(
        n[:-1] for n in allowed if n.endswith(".*") and not n.startswith(AGENT_TOOL_PREFIX)
    )


def schema_tokens(tools: Sequence[ToolSpec]) -> int:
    """Roughly what the tools' schemas cost in the prompt (4 characters a token)."""
    return sum(t.schema_chars for t in tools) // 4


CatalogLoader = Callable[[], Awaitable[list[ToolSpec]]]
CatalogVersion = Callable[[], Awaitable[int]]
# (query, allowed names, required names, max_tools, session_id, template) -> ranked names
Search = Callable[[str, Sequence[str], Sequence[str], int, str, str], Awaitable[list[str]]]
Templates = Callable[[], Sequence[AgentTemplate]]


class Toolbox:
    """Resolves templates to tool specs over a cached catalog."""

    def __init__(
        self,
        load: CatalogLoader,
        templates: Templates = lambda: (),
        search: Search | None = None,
        version: CatalogVersion | None = None,
        check_every: float = 1.0,
    ) -> None:
        self._load = load
        self._templates = templates
        self.search = search
        self._version = version
        self.check_every = check_every
        """Seconds between looks at the catalog's version (tools an admin imported or a
        tool source listed reach this process within that time)."""
        self._catalog: dict[str, ToolSpec] = {}
        self._loaded_version: int | None = None
        self._loads = 0
        self._searched: OrderedDict[str, tuple[Hashable, list[str]]] = OrderedDict()

    async def _search(
        self,
        search: Search,
        template: AgentTemplate,
        searchable: list[str],
        query: str,
        session_id: str,
    ) -> list[str]:
        """The session's last search again when nothing it depends on moved (the query,
        the template, the tools it may be offered, the catalog this process holds): every
        model call of a turn after a tool result asks the same, and toolsearch would answer
        the same. The names are kept by hash: a ``*`` template may search thousands."""
        policy = template.tool_policy
        key = (
            query,
            template.name,
            template.version,
            tuple(policy.required),
            policy.max_tools,
            len(searchable),
            hash(tuple(searchable)),
            self._loads,
        )
        last = self._searched.get(session_id)
        if last is not None and last[0] == key:
            self._searched.move_to_end(session_id)
            return last[1]
        found = await search(
            query,
            searchable,
            policy.required,
            policy.max_tools,
            session_id,
            template.name,
        )
        self._searched[session_id] = (key, found)
        self._searched.move_to_end(session_id)
        while len(self._searched) > SEARCHES_KEPT:
            self._searched.popitem(last=False)
        return found

    async def refresh(self) -> None:
        # The version first: a change while the tools load is seen at the next check.
        version = await self._version() if self._version is not None else None
        self._catalog = {tool.name: tool for tool in await self._load()}
        self._loaded_version = version
        self._loads += 1

    async def catalog(self) -> dict[str, ToolSpec]:
        if not self._catalog:
            await self.refresh()
        return self._catalog

    async def follow(self) -> None:
        """Look at the catalog's version every ``check_every`` seconds and reload it when
        it moved; beside the turns, so no model call waits for the look."""
        if self._version is None:
            return
        while True:
            await asyncio.sleep(self.check_every)
            try:
                if self._catalog and await self._version() != self._loaded_version:
                    await self.refresh()
            except ServiceError as error:  # toolsearch away: the copy we hold still serves
                log.warning("catalog version unknown", extra={"fields": {"err": error.message}})

    async def offered(self, template: AgentTemplate) -> list[ToolSpec]:
        """Exactly the tools this template may call, in a stable order."""
        catalog = await self.catalog()
        if ALL_TOOLS in template.allowed_tools:
            tools = sorted(catalog.values(), key=lambda t: t.name)
        else:
            sources = source_prefixes(template.allowed_tools)
            # agent.<name> tools are the runtime's, never the catalog's: not unknown; nor
            # is a <source>.* (its source may list nothing yet).
            missing = [
                n
                for n in template.allowed_tools
                if n not in catalog
                and not n.startswith(AGENT_TOOL_PREFIX)
                and n[:-1] not in sources
            ]
            if missing:
                await self.refresh()
                catalog = self._catalog
            tools = [catalog[n] for n in template.allowed_tools if n in catalog]
            named = {t.name for t in tools}
            tools.extend(
                catalog[n] for n in sorted(catalog) if n not in named and n.startswith(sources)
            )
        if template.tool_policy.mode == "retrieval":
            tools.append(tool_search_spec())
        if template.handoff:
            tools.append(switch_agent_spec(template.handoff))
        delegates = {
            n[len(AGENT_TOOL_PREFIX) :]
            for n in template.allowed_tools
            if n.startswith(AGENT_TOOL_PREFIX)
        }
        tools.extend(
            agent_tool_spec(t)
            for t in self._templates()
            if t.name != template.name and (t.name in delegates or "*" in delegates)
        )
        if delegates:  # an agent that may delegate may look the agents up
            tools.append(agent_search_spec())
        return tools

    async def for_step(
        self,
        template: AgentTemplate,
        everything: Sequence[ToolSpec],
        query: str,
        session_id: str,
        pinned: Sequence[str] = (),
    ) -> list[ToolSpec]:
        """What this model call is offered out of ``everything`` (the template's ``offered``):
        all of it (static mode), or what tool search finds for ``query`` plus required,
        pinned and runtime tools (retrieval)."""
        if template.tool_policy.mode != "retrieval" or not query or self.search is None:
            return list(everything)
        runtime = {TOOL_SEARCH, SWITCH_AGENT, AGENT_SEARCH}
        searchable = [
            t.name
            for t in everything
            if t.name not in runtime and not t.name.startswith(AGENT_TOOL_PREFIX)
        ]
        found = await self._search(self.search, template, searchable, query, session_id)
        chosen = {*found, *pinned, *runtime}
        return [t for t in everything if t.name in chosen or t.name.startswith(AGENT_TOOL_PREFIX)]

    async def spec_for(self, template: AgentTemplate, name: str) -> ToolSpec | None:
        """The spec when ``template`` may call ``name``; None when it may not."""
        for tool in await self.offered(template):
            if tool.name == name:
                return tool
        return None


CatalogRow = tuple[str, str, str, str, int, str, str]


CHUNK = 500
"""Catalog rows made specs between yields to the loop."""


async def catalog_from_json(
    rows: Sequence[CatalogRow], known: dict[CatalogRow, ToolSpec] | None = None
) -> list[ToolSpec]:
    """(name, description, parameters_json, executor, timeout_seconds, risk,
    remote_endpoint) rows -> specs. A row in ``known`` (the last load's, replaced by this
    one's) keeps its spec, schema parsed and tokens counted; the rest are made ``CHUNK`` at
    a time with the loop let go between: a 10,000-tool catalog took ~50 ms of the loop to
    parse in one piece, and every version change loaded it again."""
    known = {} if known is None else known
    made: dict[CatalogRow, ToolSpec] = {}
    async for chunk in in_slices(rows, CHUNK):
        for row in chunk:
            spec = known.get(row)
            if spec is None:
                n, d, p, e, t, r, u = row
                spec = ToolSpec(n, d, json.loads(p or "{}"), e, t, r or "low", u)
            made[row] = spec
    known.clear()
    known.update(made)
    return list(made.values())
