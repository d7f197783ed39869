"""Plans (approve / reject / modify), approval expiry and single-agent mode over the WebSocket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.ide import Event, ide, of, text_of
from tests.support.mesh import Mesh, running_mesh

PLAN = {
    "goal": "Add logging to the API",
    "subtasks": [
        {
            "description": "Write the logging design",
            "agent": "architect",
            "estimated_time": "10 min",
        },
        {
            "description": "Implement logging in api.py",
            "agent": "coder",
            "estimated_time": "15 min",
        },
    ],
}


def create_plan(plan: dict[str, Any] = PLAN) -> dict[str, Any]:
    return {"tool_calls": [{"name": "create_plan", "arguments": plan}]}


async def propose(client: Any, mesh: Mesh) -> dict[str, Any]:
    mesh.scripted.enqueue(create_plan())
    events = await client.say("add logging everywhere", agent_type="coder")
    (request,) = of(events, "plan_approval_required")
    assert events[-1]["status"] == "awaiting_plan_approval"
    return request


async def test_plan_approved_runs_each_step_with_its_agent(mesh: Mesh) -> None:
    async with ide(mesh, "plan-ok") as client:
        request = await propose(client, mesh)
        assert request["plan_summary"] == {
            "goal": "Add logging to the API",
            "subtasks_count": 2,
            "total_estimated_time": "25 min",
        }
        mesh.scripted.enqueue(
            {"text": "Design written."},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "api.py"}}]},
            {"text": "Logging added."},
        )
        running = await client.turn(
            {
                "type": "plan_decision",
                "decision": "approve",
                "approval_request_id": request["approval_request_id"],
            }
        )
        (call,) = of(running, "tool_call")
        assert (call["plan_id"], call["step_id"], call["agent"]) == (
            request["plan_id"],
            "2",
            "coder",
        )
        finished = await client.result(call["call_id"], "def api(): ...")
    events = running + finished
    switches = [(e["from_agent"], e["to_agent"]) for e in of(events, "agent_switched")]
    assert switches == [("coder", "architect"), ("architect", "coder"), ("coder", "orchestrator")]
    progress = [(p["step_id"], p["status"]) for p in of(events, "plan_progress")]
    assert progress == [("1", "done"), ("2", "done")]
    final = of(events, "plan_update")[-1]
    assert [s["status"] for s in final["steps"]] == ["done", "done"]
    chains = of(events, "agent_chain_update")
    assert [a["agent_id"] for a in chains[0]["agents"]] == ["architect", "coder"]
    assert finished[-1]["status"] == "completed"
    (completed,) = of(events, "execution_completed")  # seed 002: the plan finished
    assert (completed["kind"], completed["execution_id"], completed["status"]) == (
        "plan",
        request["plan_id"],
        "completed",
    )
    assert "Design written." in completed["summary"] and completed["agent"] == "coder"
    step_prompt = [m for m in mesh.scripted.requests[-2]["messages"] if m["role"] == "user"][-1]
    assert "Implement logging in api.py" in step_prompt["content"]


async def test_plan_rejected(mesh: Mesh) -> None:
    async with ide(mesh, "plan-no") as client:
        request = await propose(client, mesh)
        events = await client.turn(
            {
                "type": "plan_decision",
                "decision": "reject",
                "approval_request_id": request["approval_request_id"],
                "feedback": "not now",
            }
        )
    (rejected,) = of(events, "plan_rejected")
    assert (rejected["plan_id"], rejected["feedback"]) == (request["plan_id"], "not now")
    assert events[-1]["status"] == "completed"
    audit = await mesh.pool.fetch(
        "select decision from hitl.audit_log where event_type = 'plan_decision'"
    )
    assert [r["decision"] for r in audit] == ["plan_reject"]


async def test_plan_modified_is_proposed_again_with_the_feedback(mesh: Mesh) -> None:
    async with ide(mesh, "plan-mod") as client:
        request = await propose(client, mesh)
        revised = {**PLAN, "subtasks": PLAN["subtasks"][1:]}
        mesh.scripted.enqueue(create_plan(revised))
        events = await client.turn(
            {
                "type": "plan_decision",
                "decision": "modify",
                "approval_request_id": request["approval_request_id"],
                "feedback": "skip the design step",
            }
        )
    (asked,) = of(events, "plan_modification_requested")
    assert (asked["plan_id"], asked["feedback"], asked["planner"]) == (
        request["plan_id"],
        "skip the design step",
        "coder",
    )
    (again,) = of(events, "plan_approval_required")
    assert events.index(asked) < events.index(again)
    assert again["approval_request_id"] != request["approval_request_id"]
    assert again["plan_summary"]["subtasks_count"] == 1
    tool = mesh.scripted.requests[-1]["messages"][-1]
    assert tool["role"] == "tool" and "skip the design step" in tool["content"]


async def _revision_asked(client: Any, mesh: Mesh) -> tuple[dict[str, Any], list[Event]]:
    """A running plan whose second step (coder) proposes a revised plan."""
    request = await propose(client, mesh)
    revised = {"goal": "Log through structlog", "subtasks": [PLAN["subtasks"][1]]}
    mesh.scripted.enqueue({"text": "Design written."}, create_plan(revised))
    return request, await client.turn(
        {
            "type": "plan_decision",
            "decision": "approve",
            "approval_request_id": request["approval_request_id"],
        }
    )


async def test_the_planner_asks_to_change_an_approved_plan(mesh: Mesh) -> None:
    async with ide(mesh, "plan-revise") as client:
        request, running = await _revision_asked(client, mesh)
        (asked,) = of(running, "plan_modification_requested")
        (revision,) = of(running, "plan_approval_required")
        assert (asked["plan_id"], asked["planner"]) == (request["plan_id"], "coder")
        assert asked["approval_request_id"] == revision["approval_request_id"]
        assert "structlog" in asked["feedback"]
        assert running.index(asked) < running.index(revision)
        assert running[-1]["status"] == "awaiting_plan_approval"
        mesh.scripted.enqueue({"text": "Logged through structlog."})
        events = await client.turn(
            {
                "type": "plan_decision",
                "decision": "approve",
                "approval_request_id": revision["approval_request_id"],
            }
        )
    ended = {(e["execution_id"], e["status"]) for e in of(events, "execution_completed")}
    assert ended == {(request["plan_id"], "modified"), (revision["plan_id"], "completed")}
    assert events[-1]["status"] == "completed"
    plans = await mesh.pool.fetch(
        "select plan_id, status from orchestrator.plans where session_id = 'plan-revise'"
    )
    assert {r["plan_id"]: r["status"] for r in plans} == {
        request["plan_id"]: "modified",
        revision["plan_id"]: "completed",
    }


async def test_a_rejected_revision_leaves_the_approved_plan_running(mesh: Mesh) -> None:
    async with ide(mesh, "plan-keep") as client:
        request, running = await _revision_asked(client, mesh)
        (revision,) = of(running, "plan_approval_required")
        mesh.scripted.enqueue({"text": "Logging added as planned."})
        events = await client.turn(
            {
                "type": "plan_decision",
                "decision": "reject",
                "approval_request_id": revision["approval_request_id"],
                "feedback": "keep the plan",
            }
        )
    (rejected,) = of(events, "plan_rejected")
    assert rejected["plan_id"] == revision["plan_id"]
    (completed,) = of(events, "execution_completed")
    assert (completed["execution_id"], completed["status"]) == (request["plan_id"], "completed")
    assert "Logging added as planned." in completed["summary"]
    tool = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "keep the plan" in tool["content"] and "goes on" in tool["content"]


async def test_pending_plan_is_listed_with_the_approvals(mesh: Mesh) -> None:
    from codelab.v1 import runtime_pb2

    async with ide(mesh, "plan-list") as client:
        request = await propose(client, mesh)
    listed = await mesh.client.runtime.ListPendingApprovals(
        runtime_pb2.GetSessionRequest(session_id="plan-list")
    )
    (item,) = listed.pending_approvals
    assert (item.type, item.approval_request_id) == (
        "plan_approval",
        request["approval_request_id"],
    )


async def test_unknown_plan_decision(mesh: Mesh) -> None:
    async with ide(mesh, "plan-unknown") as client:
        events = await client.turn(
            {
                "type": "plan_decision",
                "decision": "approve",
                "approval_request_id": "plan-approval-nope",
            }
        )
    assert [e["error_code"] for e in of(events, "error")] == ["PENDING_APPROVAL_NOT_FOUND"]


@pytest.fixture
async def quick_expiry(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, hitl_timeout=0.5) as mesh:
        yield mesh


async def test_an_expired_approval_is_reported_and_the_model_is_told(quick_expiry: Mesh) -> None:
    mesh = quick_expiry
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.py", "content": "x"}}]},
        {"text": "I will wait for you then."},
    )
    async with ide(mesh, "expiry") as client:
        first = await client.say("write", agent_type="coder")
        call_id = of(first, "tool_call")[0]["call_id"]
        later = await client.until_done(seconds=15)
        assert [e["error_code"] for e in of(later, "error")] == ["HITL_TIMEOUT"]
        assert text_of(later) == "I will wait for you then."
        late = await client.decide(call_id, "approve")
    assert [e["error_code"] for e in of(late, "error")] == ["HITL_TIMEOUT"]
    tool = mesh.scripted.requests[-1]["messages"][-1]
    assert tool["role"] == "tool" and "HITL_TIMEOUT" in tool["content"]


@pytest.fixture
async def single_agent(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as mesh:
        yield mesh


async def test_single_agent_mode_serves_universal_alone(single_agent: Mesh) -> None:
    mesh = single_agent
    async with ide(mesh, "single") as client:
        events = await client.say("Say hello in one sentence")
    assert not of(events, "agent_switched")
    assert events[-1]["status"] == "completed"
    request = mesh.scripted.requests[-1]
    assert "universal AI assistant" in request["messages"][0]["content"]
    assert "create_plan" in {t["function"]["name"] for t in request["tools"]}
