"""The tools an agent is offered: its template's list resolved against the catalog, the
runtime's own tools added by mode, hand-over and delegation, and per step in retrieval
mode only what tool search found plus what must always be there."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from services.common.errors import ServiceError
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.turn.toolbox import (
    AGENT_SEARCH,
    SWITCH_AGENT,
    TOOL_SEARCH,
    CatalogRow,
    Toolbox,
    ToolSpec,
    catalog_from_json,
    schema_tokens,
)


def spec(name: str, executor: str = "ide") -> ToolSpec:
    return ToolSpec(name, f"{name} does it", {"type": "object", "properties": {}}, executor)


class Catalog:
    """The toolsearch side: the tools it lists, and how often it was asked."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.loads = 0

    async def __call__(self) -> list[ToolSpec]:
        self.loads += 1
        return [spec(n) for n in self.names]


class Search:
    """Tool search: answers ``found`` and remembers what it was asked."""

    def __init__(self, *found: str) -> None:
        self.found = list(found)
        self.asked: list[tuple[Any, ...]] = []

    async def __call__(
        self,
        query: str,
        allowed: Sequence[str],
        required: Sequence[str],
        most: int,
        session_id: str,
        template: str,
    ) -> list[str]:
        self.asked.append((query, list(allowed), list(required), most, session_id, template))
        return self.found


def template(name: str, *allowed: str, **definition: Any) -> AgentTemplate:
    policy = {"allowed": list(allowed), **definition.pop("tool_policy", {})}
    return AgentTemplate.from_definition(
        {"name": name, "description": f"{name} agent", "tool_policy": policy, **definition}
    )


def names(tools: Sequence[ToolSpec]) -> list[str]:
    return [t.name for t in tools]


CATALOG = ("write_file", "read_file", "list_files", "execute_command", "attempt_completion")


async def test_a_static_template_gets_exactly_its_tools_in_its_order() -> None:
    box = Toolbox(Catalog(*CATALOG))
    coder = template("coder", "read_file", "write_file", "attempt_completion")
    assert names(await box.offered(coder)) == ["read_file", "write_file", "attempt_completion"]


async def test_every_tool_sorted_by_name_for_a_star_template() -> None:
    box = Toolbox(Catalog(*CATALOG))
    assert names(await box.offered(template("universal", "*"))) == sorted(CATALOG)


async def test_an_unknown_tool_refreshes_the_catalog_once_per_lookup() -> None:
    catalog = Catalog("read_file")
    box = Toolbox(catalog)
    agent = template("coder", "read_file", "git.diff")
    assert names(await box.offered(agent)) == ["read_file"]  # not in the catalog: left out
    catalog.names.append("git.diff")
    assert names(await box.offered(agent)) == ["read_file", "git.diff"]


async def test_a_known_catalog_is_not_loaded_again() -> None:
    catalog = Catalog(*CATALOG)
    box = Toolbox(catalog)
    agent = template("ask", "read_file", "list_files")
    for _ in range(3):
        await box.offered(agent)
    assert catalog.loads == 1


async def test_a_delegating_template_does_not_reload_the_catalog_every_step() -> None:
    # agent.<name> tools are the runtime's, never in the catalog: they are not "unknown".
    catalog = Catalog(*CATALOG)
    box = Toolbox(catalog, lambda: [template("coder", "*")])
    conductor = template("conductor", "read_file", "agent.*")
    for _ in range(3):
        await box.offered(conductor)
    assert catalog.loads == 1


async def test_retrieval_mode_adds_tool_search_and_handoff_adds_switch_agent() -> None:
    box = Toolbox(Catalog(*CATALOG))
    debug = template(
        "debug", "read_file", handoff=["coder", "architect"], tool_policy={"mode": "retrieval"}
    )
    tools = await box.offered(debug)
    assert names(tools) == ["read_file", TOOL_SEARCH, SWITCH_AGENT]
    switch = tools[-1]
    assert switch.executor == "system"
    assert switch.parameters["properties"]["agent_type"]["enum"] == ["coder", "architect"]
    assert switch.parameters["required"] == ["agent_type", "reason"]
    assert tools[1].parameters["properties"]["top_k"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 10,
    }


async def test_named_delegates_become_agent_tools_and_bring_agent_search() -> None:
    served = [template(n, "read_file") for n in ("coder", "ask", "lead")]
    box = Toolbox(Catalog(*CATALOG), lambda: served)
    lead = template("lead", "read_file", "agent.coder", "agent.missing")
    tools = await box.offered(lead)
    assert names(tools) == ["read_file", "agent.coder", AGENT_SEARCH]
    delegate = tools[1]
    assert delegate.executor == "agent"
    assert "coder agent" in delegate.description
    assert delegate.parameters["required"] == ["task"]


async def test_the_runtime_s_own_specs_are_made_once_not_at_every_step() -> None:
    # A kept spec keeps its schema's JSON and token count: a step does not encode them again.
    served = [template(n, "read_file", description=f"{n} v1") for n in ("coder", "ask")]
    box = Toolbox(Catalog(*CATALOG), lambda: served)
    lead = template("lead", "agent.*", handoff=["coder"], tool_policy={"mode": "retrieval"})
    first, again = await box.offered(lead), await box.offered(lead)
    assert names(first) == names(again)
    assert all(a is b for a, b in zip(first, again, strict=True))
    served[0] = template("coder", "read_file", description="coder v2")
    changed = {t.name: t for t in await box.offered(lead)}
    assert "coder v2" in changed["agent.coder"].description
    assert changed["agent.ask"] is next(t for t in first if t.name == "agent.ask")


async def test_agent_star_offers_every_other_served_agent_but_itself() -> None:
    served = [template(n, "read_file") for n in ("coder", "ask", "conductor")]
    box = Toolbox(Catalog(*CATALOG), lambda: served)
    conductor = template("conductor", "agent.*")
    assert names(await box.offered(conductor)) == ["agent.coder", "agent.ask", AGENT_SEARCH]
    assert AGENT_SEARCH not in names(await box.offered(template("coder", "*")))


async def test_a_static_step_is_offered_everything_without_searching() -> None:
    search = Search("read_file")
    box = Toolbox(Catalog(*CATALOG), search=search)
    coder = template("coder", "read_file", "write_file")
    everything = await box.offered(coder)
    assert await box.for_step(coder, everything, "fix it", "s1") == everything
    assert search.asked == []


async def test_a_retrieval_step_keeps_what_search_found_and_what_must_stay() -> None:
    served = [template("ask", "read_file")]
    search = Search("read_file", "execute_command")  # toolsearch puts required ones first
    box = Toolbox(Catalog(*CATALOG), lambda: served, search)
    agent = template(
        "debug",
        "read_file",
        "write_file",
        "execute_command",
        "list_files",
        "agent.ask",
        handoff=["coder"],
        tool_policy={"mode": "retrieval", "required": ["read_file"], "max_tools": 4},
    )
    everything = await box.offered(agent)
    step = await box.for_step(agent, everything, "run the tests", "s1", pinned=("list_files",))
    # Offered order is kept; write_file, not found, is left out; the pin stays.
    assert names(step) == [
        "read_file",
        "execute_command",
        "list_files",
        TOOL_SEARCH,
        SWITCH_AGENT,
        "agent.ask",
        AGENT_SEARCH,
    ]
    [(query, allowed, required, most, session, name)] = search.asked
    assert (query, required, most, session, name) == (
        "run the tests",
        ["read_file"],
        4,
        "s1",
        "debug",
    )
    assert allowed == ["read_file", "write_file", "execute_command", "list_files"]


@pytest.mark.parametrize(("query", "searching"), [("", True), ("find it", False)])
async def test_retrieval_without_a_query_or_a_search_offers_everything(
    query: str, searching: bool
) -> None:
    search = Search()
    box = Toolbox(Catalog(*CATALOG), search=search if searching else None)
    agent = template("debug", "read_file", "write_file", tool_policy={"mode": "retrieval"})
    everything = await box.offered(agent)
    assert await box.for_step(agent, everything, query, "s1") == everything
    assert search.asked == []


async def test_spec_for_answers_only_what_the_template_may_call() -> None:
    box = Toolbox(Catalog(*CATALOG))
    ask = template("ask", "read_file", handoff=["coder"])
    found = await box.spec_for(ask, "read_file")
    assert found is not None and found.name == "read_file"
    assert await box.spec_for(ask, "write_file") is None
    assert await box.spec_for(ask, "nonexistent") is None
    switch = await box.spec_for(ask, SWITCH_AGENT)
    assert switch is not None and switch.executor == "system"


def test_schema_tokens_are_a_quarter_of_the_definitions_length() -> None:
    tools = [spec("read_file"), spec("write_file")]
    chars = sum(len(json.dumps(t.as_function())) for t in tools)
    assert schema_tokens(tools) == chars // 4
    assert schema_tokens([]) == 0
    assert tools[0].parameters_json == json.dumps(tools[0].parameters)
    assert tools[0].prompt_tokens > 8  # two message overheads and the schema's pieces


async def test_catalog_rows_become_specs() -> None:
    rows = [
        ("read_file", "reads", '{"type": "object", "required": ["path"]}', "ide", 30, "", ""),
        ("now", "time", "", "local", 0, "low", ""),
        ("calc.sum", "adds", "{}", "remote", 0, "medium", "https://calc.internal/sum"),
    ]
    read, now, remote = await catalog_from_json(rows)
    assert read == ToolSpec(
        "read_file", "reads", {"type": "object", "required": ["path"]}, "ide", 30
    )
    assert (now.parameters, now.executor, now.timeout_seconds) == ({}, "local", 0)
    assert (remote.risk, remote.remote_endpoint) == ("medium", "https://calc.internal/sum")


async def test_a_reload_keeps_the_specs_of_unchanged_rows_and_lets_the_loop_run() -> None:
    schema = '{"type": "object"}'
    rows = [(f"tool_{i:04}", "does", schema, "ide", 0, "low", "") for i in range(1200)]
    known: dict[CatalogRow, ToolSpec] = {}
    first = await catalog_from_json(rows, known)
    assert first[7].prompt_tokens  # counted once, kept with the spec
    rows[7] = ("tool_0007", "does more", schema, "ide", 0, "low", "")
    built = False
    seen: list[bool] = []

    async def other() -> None:
        seen.append(built)

    task = asyncio.create_task(other())
    second = await catalog_from_json(rows, known)
    built = True
    await task
    assert seen == [False]  # it ran while the specs were made
    assert [t.name for t in second] == [t.name for t in first]
    assert second[0] is first[0] and second[-1] is first[-1]
    assert second[7] is not first[7] and second[7].description == "does more"
    assert set(known) == set(rows)  # the row that changed is forgotten


async def test_the_catalog_is_followed_beside_the_turns_not_on_their_path() -> None:
    versions = [1]
    loads: list[int] = []
    reloaded = asyncio.Event()

    async def load() -> list[ToolSpec]:
        loads.append(versions[-1])
        if len(loads) > 1:
            reloaded.set()
        return [spec(f"tool_v{versions[-1]}")]

    async def version() -> int:
        return versions[-1]

    toolbox = Toolbox(load, version=version, check_every=0.01)
    assert list(await toolbox.catalog()) == ["tool_v1"]
    versions.append(2)  # an admin imported tools
    assert list(await toolbox.catalog()) == ["tool_v1"]  # a turn never waits for the look
    follower = asyncio.create_task(toolbox.follow())
    try:
        async with asyncio.timeout(5):
            await reloaded.wait()
    finally:
        follower.cancel()
    assert list(await toolbox.catalog()) == ["tool_v2"]
    assert loads == [1, 2]


async def test_a_session_searching_the_same_again_is_answered_without_asking() -> None:
    """Every model call of a turn after a tool result has the same query: toolsearch is
    asked once, and again only when the query, the tools or the catalog moved."""
    search = Search("read_file")
    catalog = Catalog(*CATALOG)
    box = Toolbox(catalog, search=search)
    agent = template("debug", "read_file", "write_file", tool_policy={"mode": "retrieval"})
    everything = await box.offered(agent)
    first = await box.for_step(agent, everything, "run the tests", "s1")
    assert await box.for_step(agent, everything, "run the tests", "s1") == first
    assert len(search.asked) == 1
    await box.for_step(agent, everything, "run the tests", "s2")  # another session
    await box.for_step(agent, everything, "now the docs", "s1")  # another query
    assert [(a[0], a[4]) for a in search.asked[1:]] == [
        ("run the tests", "s2"),
        ("now the docs", "s1"),
    ]
    wider = template(
        "debug", "read_file", "write_file", "list_files", tool_policy={"mode": "retrieval"}
    )
    await box.for_step(wider, await box.offered(wider), "now the docs", "s1")  # other tools
    catalog.names.append("git_status")
    await box.refresh()
    await box.for_step(agent, await box.offered(agent), "now the docs", "s1")  # reloaded
    assert len(search.asked) == 5


async def test_a_failed_search_is_not_remembered() -> None:
    class Failing(Search):
        async def __call__(self, *asked: Any) -> list[str]:
            self.asked.append(asked)
            if len(self.asked) == 1:
                raise ServiceError("toolsearch is away")
            return ["read_file"]

    search = Failing()
    box = Toolbox(Catalog(*CATALOG), search=search)
    agent = template("debug", "read_file", "write_file", tool_policy={"mode": "retrieval"})
    everything = await box.offered(agent)
    with pytest.raises(ServiceError):
        await box.for_step(agent, everything, "run the tests", "s1")
    assert names(await box.for_step(agent, everything, "run the tests", "s1"))[0] == "read_file"
    assert len(search.asked) == 2
