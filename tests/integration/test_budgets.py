"""Seed 003's execution_policy budgets, enforced: iterations, clarifications, searches,
timeouts and stop conditions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.databases import add_template
from tests.support.ide import ide, of, text_of
from tests.support.mesh import Mesh, running_mesh
from tests.support.sessions import settled_session

TOOLS = ["read_file", "write_file", "search_in_code", "ask_followup_question",
         "attempt_completion"]  # fmt: skip


def template(name: str, **policy: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"budget test agent {name}",
        "prompt_pack": {"system_prompt": f"You are {name}."},
        "tool_policy": {"allowed": TOOLS},
        "execution_policy": policy,
    }


BUDGETED = [
    template("looper", max_iterations=2),
    template("curious", max_clarifications=1),
    template("searcher", max_searches=1),
    template("hasty", timeouts={"llm_seconds": 1, "approval_seconds": 42}),
    template("brief", timeouts={"approval_seconds": 1}),
    template("writer", stop_conditions=["tool:write_file"]),
]


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    for definition in BUDGETED:
        await add_template(database_url, definition)
    async with running_mesh(database_url) as running:
        yield running


def calls(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def errors(events: list[dict[str, Any]]) -> list[str]:
    return [e["error_code"] for e in of(events, "error")]


async def test_max_iterations_stops_the_turn(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls("read_file", {"path": "a.py"}), calls("read_file", {"path": "b.py"})
    )
    async with ide(mesh, "iterations") as client:
        first = await client.say("read everything", agent_type="looper")
        second = await client.result(of(first, "tool_call")[0]["call_id"], "a")
        third = await client.result(of(second, "tool_call")[0]["call_id"], "b")
    (error,) = of(third, "error")
    assert error["error_code"] == "BUDGET_EXCEEDED"
    assert "looper stopped: this turn's max_iterations (2) is spent" in error["content"]
    assert third[-1]["status"] == "error"
    assert len(mesh.scripted.requests) == 2


async def test_max_clarifications_takes_the_question_away_once_asked(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls("ask_followup_question", {"question": "Which file?"}),
        calls("ask_followup_question", {"question": "And which line?"}),
        {"text": "Assuming main.py, line 1."},
    )
    async with ide(mesh, "clarify") as client:
        first = await client.say("fix the bug", agent_type="curious")
        assert first[-1]["status"] == "awaiting_user"
        second = await client.say("main.py")
    assert "ask_followup_question" in offered(mesh.scripted.requests[0])
    assert "ask_followup_question" not in offered(mesh.scripted.requests[1])
    assert errors(second) == ["TOOL_VALIDATION_ERROR"]
    told = mesh.scripted.requests[2]["messages"][-1]
    assert "clarification budget (1 per task)" in told["content"]
    assert text_of(second).endswith("Assuming main.py, line 1.")
    assert second[-1]["status"] == "completed"
    session = await settled_session(mesh.pool, "clarify")
    assert session["clarifications_used"] == 0  # the task ended: the next one starts afresh


async def test_max_searches_refuses_the_second_search(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls("search_in_code", {"query": "def main"}),
        calls("search_in_code", {"query": "def other"}),
        {"text": "Found main only."},
    )
    async with ide(mesh, "search") as client:
        first = await client.say("where is main?", agent_type="searcher")
        second = await client.result(of(first, "tool_call")[0]["call_id"], ["main.py:1"])
    assert "search_in_code" in offered(mesh.scripted.requests[0])
    assert "search_in_code" not in offered(mesh.scripted.requests[1])
    assert errors(second) == ["TOOL_VALIDATION_ERROR"] and not of(second, "tool_call")
    assert "search budget (1 per task)" in mesh.scripted.requests[2]["messages"][-1]["content"]
    assert second[-1]["status"] == "completed"


async def test_timeouts_bound_the_model_call_and_the_approval(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        calls("write_file", {"path": "a.py", "content": "x"}),
        {"text": "too late", "first_token_delay_ms": 3000},
    )
    async with ide(mesh, "timeouts") as client:
        first = await client.say("write it", agent_type="hasty")
        (call,) = of(first, "tool_call")
        second = await client.decide(call["call_id"], "reject")
    timeout = await mesh.pool.fetchval(
        "select timeout_seconds from hitl.approvals where call_id = $1", call["call_id"]
    )
    assert timeout == 42
    assert mesh.scripted.requests[0].get("stream") is True
    assert errors(second) == ["LLM_TIMEOUT"] and second[-1]["status"] == "error"


async def test_the_templates_approval_timeout_expires_the_approval(mesh: Mesh) -> None:
    """hitl's own expiry is 300 s here: only the template's second can end this wait."""
    mesh.scripted.enqueue(
        calls("write_file", {"path": "a.py", "content": "x"}), {"text": "Not written."}
    )
    async with ide(mesh, "brief") as client:
        first = await client.say("write it", agent_type="brief")
        assert first[-1]["status"] == "awaiting_approval"
        later = await client.until_done(seconds=15)
    assert errors(later) == ["HITL_TIMEOUT"] and text_of(later) == "Not written."


async def test_a_stop_condition_ends_the_task_without_another_model_call(mesh: Mesh) -> None:
    mesh.scripted.enqueue(calls("write_file", {"path": "notes.md", "content": "x"}))
    async with ide(mesh, "stop") as client:
        first = await client.say("write the notes", agent_type="writer")
        call = of(first, "tool_call")[0]
        second = await client.decide(call["call_id"], "approve")
        third = await client.result(call["call_id"], {"ok": True})
    assert len(mesh.scripted.requests) == 1 and second[-1]["status"] == "awaiting_tool_result"
    assert third[-1]["status"] == "completed" and not of(third, "error")
    assert of(third, "agent_switched")[-1]["to_agent"] == "orchestrator"
