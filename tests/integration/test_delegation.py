"""Agent-as-tool: ``agent.<template>`` runs a task in a child session and returns its answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.databases import add_template
from tests.support.ide import ide, of, text_of
from tests.support.mesh import Mesh, running_mesh
from tests.support.templates import lead_template

LEAD = lead_template("agent.ask", "agent.debug")


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """A mesh whose catalog of templates also has a delegating 'lead' agent."""
    await add_template(database_url, LEAD)
    async with running_mesh(database_url) as running:
        yield running


def offered(request: dict[str, Any]) -> set[str]:
    """Names as the upstream sees them: ``agent.ask`` goes as ``agent_ask``."""
    return {t["function"]["name"] for t in request.get("tools", [])}


async def test_a_delegate_answers_for_the_parent(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {
            "tool_calls": [
                {
                    "name": "agent_ask",
                    "arguments": {"task": "Explain what main.py does", "context": "a small CLI"},
                }
            ]
        },
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}]},
        {"text": "main.py prints a greeting."},
        {"text": "The ask agent says: main.py prints a greeting."},
    )
    async with ide(mesh, "delegate") as client:
        first = await client.say("what does main.py do?", agent_type="lead")
        lead_request = mesh.scripted.requests[-2]
        assert {"agent_ask", "agent_debug", "agent_search", "read_file"} == offered(lead_request)
        (call,) = of(first, "tool_call")  # the delegate's IDE call reaches the parent's client
        assert (call["agent"], call["tool_name"]) == ("ask", "read_file")
        (chain,) = of(first, "agent_chain_update")
        assert [a["agent_id"] for a in chain["agents"]] == ["lead", "ask"]
        assert chain["current_agent"] == "ask"
        second = await client.result(call["call_id"], "print('hello')")
    assert text_of(second).endswith("The ask agent says: main.py prints a greeting.")
    done_chain = of(second, "agent_chain_update")[-1]
    assert [a["status"] for a in done_chain["agents"]] == ["running", "done"]
    (completed,) = of(second, "execution_completed")  # seed 002: the delegated chain ended
    assert (completed["kind"], completed["execution_id"], completed["agent"]) == (
        "delegation",
        chain["chain_id"],
        "lead",
    )
    assert completed["summary"] == "main.py prints a greeting."
    child_prompt = mesh.scripted.requests[-3]["messages"]
    assert "You are the Ask agent" in child_prompt[0]["content"]
    assert child_prompt[1]["content"] == "Explain what main.py does\n\nContext: a small CLI"
    parent_prompt = mesh.scripted.requests[-1]["messages"]
    assert parent_prompt[-1]["role"] == "tool"
    assert parent_prompt[-1]["content"] == "main.py prints a greeting."
    assert second[-1]["status"] == "completed"


async def test_cancel_during_delegation_closes_the_childs_calls(mesh: Mesh) -> None:
    from tests.support.history import history_problems

    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "agent_debug", "arguments": {"task": "find the bug"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "bug.py"}}]},
        {"text": "ok, starting over"},
    )
    async with ide(mesh, "delegate-cancel") as client:
        first = await client.say("find the bug", agent_type="lead")
        call = of(first, "tool_call")[0]
        cancelled = await client.turn({"type": "cancel"})
        late = await client.result(call["call_id"], "too late")
        after = await client.say("never mind", agent_type="lead")
    assert cancelled[-1]["status"] == "cancelled"
    assert [e["error_code"] for e in of(late, "error")] == ["CANCELLED"]
    assert text_of(after) == "ok, starting over"
    assert history_problems(mesh.scripted.requests[-1]["messages"]) == []
