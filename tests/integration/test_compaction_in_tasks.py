"""Compaction inside a delegated child and inside a plan step, through the real mesh: the
IDE hears of it on the session it talks to, and no request passes the budget."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.budget import all_fit, small_window, source_file
from tests.support.databases import add_template
from tests.support.ide import Event, Ide, ide, of, text_of
from tests.support.mesh import Mesh, running_mesh
from tests.support.templates import lead_template

FILES, LINES = 8, 160
"""Large reads in one task (about 2,600 tokens each): more than the window holds."""
SUMMARY = "Summary: the handlers read so far all take (request, context)."
LEAD = lead_template("agent.ask")


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    await add_template(database_url, LEAD)
    async with running_mesh(database_url) as running:
        await small_window(running, "lead", "ask", "coder", "architect", "orchestrator")
        # A summary request carries the older messages as a transcript ("[assistant] ...");
        # it gets this answer, the task's own requests take the scenarios queued after it.
        running.scripted.enqueue({"match": "[assistant] ", "text": SUMMARY, "repeat": True})
        yield running


def reads(count: int = FILES) -> list[dict[str, Any]]:
    """One model answer per file: read it."""
    return [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"src/handler_{n}.py"}}]}
        for n in range(count)
    ]


async def answer_reads(client: Ide, events: list[Event]) -> list[Event]:
    """Answer each read_file the agent asks for with a large file, until it stops asking."""
    seen = list(events)
    for n in range(FILES):
        (call,) = of(events, "tool_call")
        assert call["arguments"] == {"path": f"src/handler_{n}.py"}
        events = await client.result(call["call_id"], source_file(n, LINES))
        seen += events
    assert not of(events, "tool_call")
    return seen


def in_system_prompt(mesh: Mesh, text: str) -> bool:
    return any(text in r["messages"][0]["content"] for r in mesh.scripted.requests)


async def test_a_delegated_child_compacts_and_the_parent_hears_of_it(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "agent_ask", "arguments": {"task": "Read every handler"}}]},
        *reads(),
        {"text": "Every handler takes (request, context)."},
        {"text": "The ask agent says: every handler takes (request, context)."},
    )
    async with ide(mesh, "compact-child") as client:
        first = await client.say("how do the handlers look?", agent_type="lead")
        assert [c["agent"] for c in of(first, "tool_call")] == ["ask"]
        events = await answer_reads(client, first)
        # The child's later prompts carry the summary, not the reads it covers.
        assert in_system_prompt(mesh, SUMMARY)
        all_fit(mesh)

    compacted = of(events, "context_compacted")
    assert compacted and all(c["tokens_after"] < c["tokens_before"] for c in compacted)
    assert text_of(events).endswith("The ask agent says: every handler takes (request, context).")
    assert events[-1]["status"] == "completed"
    rows = await mesh.pool.fetch(
        "select s.session_id, s.parent_session_id from orchestrator.summaries m"
        " join orchestrator.sessions s using (session_id)"
    )
    assert rows and {r["parent_session_id"] for r in rows} == {"compact-child"}


async def test_a_plan_step_compacts_and_the_next_step_goes_on(mesh: Mesh) -> None:
    plan = {
        "goal": "Document the handlers",
        "subtasks": [
            {"description": "Read every handler", "agent": "coder", "estimated_time": "5 min"},
            {"description": "Write the design", "agent": "architect", "estimated_time": "5 min"},
        ],
    }
    mesh.scripted.enqueue({"tool_calls": [{"name": "create_plan", "arguments": plan}]})
    async with ide(mesh, "compact-plan") as client:
        proposed = await client.say("document the handlers", agent_type="coder")
        (request,) = of(proposed, "plan_approval_required")
        mesh.scripted.enqueue(
            *reads(), {"text": "Every handler takes (request, context)."}, {"text": "Designed."}
        )
        approved = await client.turn(
            {
                "type": "plan_decision",
                "decision": "approve",
                "approval_request_id": request["approval_request_id"],
            }
        )
        events = await answer_reads(client, approved)
        last_step = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "user"]
        all_fit(mesh)

    kinds = [e["type"] for e in events]
    first_done = next(
        i for i, e in enumerate(events) if e["type"] == "plan_progress" and e["step_id"] == "1"
    )
    assert "context_compacted" in kinds[:first_done]  # within the step that read the files
    assert [(p["step_id"], p["status"]) for p in of(events, "plan_progress")] == [
        ("1", "done"),
        ("2", "done"),
    ]
    assert "Write the design" in last_step[-1]["content"]
    assert events[-1]["status"] == "completed"
    assert await mesh.pool.fetchval(
        "select count(*) from orchestrator.summaries where session_id = 'compact-plan'"
    )
