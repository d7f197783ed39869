"""Tool policy "retrieval": tool search picks each step's tools; tool_search pins more;
the session reports the schema tokens saved. Also the session state machine per turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.databases import add_template
from tests.support.early import outcome
from tests.support.ide import ide, of
from tests.support.mesh import Mesh, running_mesh

FINDER = {
    "name": "finder",
    "display_name": "Finder Agent",
    "description": "Works with whatever tools tool search finds",
    "base_class": "ToolCallingAgent",
    "prompt_pack": {"system_prompt": "You find the right tool for each step."},
    "llm_config": {},
    "execution_policy": {"max_iterations": 10, "max_tool_calls": 20, "max_invalid_arguments": 3},
    "tool_policy": {
        "mode": "retrieval",
        "allowed": ["*"],
        "required": ["attempt_completion"],
        "max_tools": 4,
    },
    "file_restrictions": [],
    "handoff": [],
    "hitl": {},
    "multiagent_meta": {"capabilities": "anything", "tags": []},
}


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """The mesh with one more template installed."""
    await add_template(database_url, FINDER)
    async with running_mesh(database_url) as running:
        yield running


async def state_of(mesh: Mesh, sid: str, expected: str) -> str:
    """The session's state once it settles on ``expected`` (it moves just after `done`)."""
    state = ""
    for _ in range(50):
        state = await mesh.pool.fetchval(
            "select state from orchestrator.sessions where session_id = $1", sid
        )
        if state == expected:
            break
        await asyncio.sleep(0.05)
    return state


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


async def tool_tokens(mesh: Mesh, sid: str) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        body = (await http.get(f"/events/metrics/session/{sid}")).json()
    tokens: dict[str, int] = body["tool_schema_tokens"]
    return tokens


async def test_retrieval_offers_what_the_step_needs_within_the_cap(mesh: Mesh) -> None:
    async with ide(mesh, "finder-1") as client:
        await client.say("read the file main.py and show its content", agent_type="finder")
    tools = offered(mesh.scripted.requests[-1])
    assert "read_file" in tools and "attempt_completion" in tools and "tool_search" in tools
    assert len(tools - {"tool_search"}) <= 4
    tokens = await tool_tokens(mesh, "finder-1")
    assert 0 < tokens["offered"] < tokens["all_allowed"]
    assert tokens["saved"] == tokens["all_allowed"] - tokens["offered"]


async def test_static_agents_are_offered_everything_and_save_nothing(mesh: Mesh) -> None:
    async with ide(mesh, "static-1") as client:
        await client.say("hello", agent_type="coder")
    tokens = await tool_tokens(mesh, "static-1")
    assert tokens["offered"] == tokens["all_allowed"] > 0 and tokens["saved"] == 0


async def test_every_model_call_of_a_tool_round_trip_is_counted(mesh: Mesh) -> None:
    async with ide(mesh, "one-call") as client:
        await client.say("hello", agent_type="coder")
    one = await tool_tokens(mesh, "one-call")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}]},
        {"text": "Read it."},
    )
    async with ide(mesh, "round-trip") as client:
        asked = await client.say("read main.py", agent_type="coder")
        [call] = of(asked, "tool_call")
        await client.result(call["call_id"], {"content": "print(1)"})
    # The call after the result is counted with its message's end, not in a write of its own.
    both = await tool_tokens(mesh, "round-trip")
    assert both["offered"] == 2 * one["offered"] and both["all_allowed"] == 2 * one["all_allowed"]


async def test_tool_search_pins_tools_for_the_next_steps_of_this_session_only(
    mesh: Mesh,
) -> None:
    mesh.scripted.enqueue(
        {
            "tool_calls": [
                {"name": "tool_search", "arguments": {"query": "apply a unified diff patch"}}
            ]
        },
        {"text": "Found the patch tool."},
    )
    async with ide(mesh, "finder-2") as client:
        await client.say("hello there", agent_type="finder")
    found = json.loads(mesh.scripted.requests[-1]["messages"][-1]["content"])
    assert "apply_patch" in [t["name"] for t in found]
    assert "apply_patch" in offered(mesh.scripted.requests[-1])
    async with ide(mesh, "finder-3") as client:  # the next session, on the same instance
        await client.say("hello there", agent_type="finder")
    assert "apply_patch" not in offered(mesh.scripted.requests[-1])
    rows = await mesh.pool.fetch(
        "select instance_id from orchestrator.sessions where session_id in ('finder-2','finder-3')"
    )
    assert len({r["instance_id"] for r in rows}) == 1  # reused, and nothing leaked


@pytest.mark.parametrize(
    ("scenario", "state"),
    [
        ({"text": "Done."}, "COMPLETED"),
        (
            {
                "tool_calls": [
                    {"name": "ask_followup_question", "arguments": {"question": "Which file?"}}
                ]
            },
            "WAITING_FOR_CLARIFICATION",
        ),
        ({"error": {"status": 400, "message": "bad"}}, "FAILED"),
    ],
)
async def test_session_state_follows_the_turn(
    mesh: Mesh, scenario: dict[str, Any], state: str
) -> None:
    mesh.scripted.enqueue(scenario)
    async with ide(mesh, "states") as client:
        events = await client.say("go", agent_type="coder")
    assert events[-1]["type"] == "done"
    assert await state_of(mesh, "states", state) == state


async def test_a_cancelled_turn_leaves_the_session_cancelled(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]})
    async with ide(mesh, "states-cancel") as client:
        first = await client.say("read", agent_type="coder")
        assert of(first, "tool_call")
        await client.turn({"type": "cancel"})
    assert await state_of(mesh, "states-cancel", "CANCELLED") == "CANCELLED"


async def test_tools_chosen_per_query_leave_the_next_turn_unguessed(mesh: Mesh) -> None:
    """A retrieval template's next request depends on what search finds for the new
    message: no early request is made for it (none would be taken)."""
    before = (outcome("taken"), outcome("replaced"))
    async with ide(mesh, "finder-early") as client:
        await client.say("find one", agent_type="finder")
        await client.say("find another", agent_type="finder")
    assert (outcome("taken"), outcome("replaced")) == before
    asked = [b["messages"][-1]["content"] for b in mesh.scripted.requests]
    assert asked.count("find another") == 1
