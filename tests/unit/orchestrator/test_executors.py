"""Each executor against a recording port: what it asks of the loop, what it writes.

Postgres is real (the store and ledger of a migrated database); only the loop is replaced,
by ``FakePort``, which is what executors see of it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from services.common.db import Pool
from services.orchestrator.agents.agent_instance import SCRATCH
from services.orchestrator.agents.templates import AgentRegistry, install_templates
from services.orchestrator.peers.agent_directory import AgentDirectory
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.state.store import SessionStore, StoredMessage
from services.orchestrator.turn.executors.delegation import Delegation, task_text
from services.orchestrator.turn.executors.ide import IdeTools
from services.orchestrator.turn.executors.local import LocalTools
from services.orchestrator.turn.executors.plans import PlanRunner
from services.orchestrator.turn.executors.system_tools import SystemTools
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.toolbox import Toolbox, ToolSpec
from tests.support.fake_port import FakePort

SID = "exec-session"


@pytest.fixture
async def port(pool: Pool) -> AsyncIterator[FakePort]:
    store = SessionStore(pool)
    await store.ensure_session(SID, "user-1", agent="coder")
    agents = AgentRegistry(await install_templates(pool), multi_agent_mode=True)
    yield FakePort(store, Ledger(pool), agents)


async def proposed(port: FakePort, tool: str, arguments: dict[str, Any]) -> LedgerCall:
    call = LedgerCall(
        call_id=f"call-{tool}-{len(port.moves)}",
        session_id=SID,
        agent="coder",
        tool_name=tool,
        arguments=json.dumps(arguments),
        executor="",
        state="proposed",
    )
    answer = StoredMessage(
        "assistant",
        "",
        tool_calls=[{"id": call.call_id, "name": tool, "arguments": call.arguments}],
    )
    await port.ledger.propose(answer, [call])
    return call


async def state_of(port: FakePort, call: LedgerCall) -> str:
    stored = await port.ledger.get(SID, call.call_id)
    assert stored is not None
    return stored.state


async def test_a_local_tool_records_its_result_and_the_loop_goes_on(port: FakePort) -> None:
    executor = LocalTools(port)
    coder = port.agents.get("coder")
    ok = await proposed(port, "calculator", {"expression": "6*7"})
    assert await executor.run(ok, coder, {"expression": "6*7"}) is False
    bad = await proposed(port, "calculator", {"expression": "os.system('x')"})
    assert await executor.run(bad, coder, {"expression": "os.system('x')"}) is False
    assert port.moves[0] == ("complete", ok.call_id, "completed", "42")
    assert port.moves[1][:3] == ("complete", bad.call_id, "failed")
    assert not executor.gated


async def test_an_ide_tool_is_dispatched_with_the_reason_it_may_run(port: FakePort) -> None:
    executor = IdeTools(port, port.ledger)
    call = dataclasses.replace(
        await proposed(port, "read_file", {"path": "a.py"}), reason="approved by the user"
    )
    waits = await executor.run(call, port.agents.get("coder"), {"path": "a.py"})
    assert waits is True and executor.gated
    assert await state_of(port, call) == "dispatched"
    assert port.kinds() == ["emit:tool_call", "emit:done"]
    sent = port.moves[0][3].tool_call
    assert (sent.tool_name, sent.reason, sent.requires_approval) == (
        "read_file",
        "approved by the user",
        False,
    )
    assert port.moves[1][3].done.status == "awaiting_tool_result"


def system_tools(port: FakePort, found: Sequence[str] = ()) -> SystemTools:
    catalog = [
        ToolSpec("read_file", "Read a file", {"type": "object"}, "ide"),
        ToolSpec("search_in_code", "Search the code", {"type": "object"}, "ide"),
    ]

    async def load() -> list[ToolSpec]:
        return catalog

    async def search(query: str, allowed: Sequence[str], *_: Any) -> list[str]:
        return [n for n in found if n in allowed]

    toolbox = Toolbox(load, port.agents.all, search)
    return SystemTools(port, toolbox, port.agents, AgentDirectory(port.agents))


async def test_switch_agent_records_the_handover_and_goes_on(port: FakePort) -> None:
    call = await proposed(port, "switch_agent", {"agent_type": "debug", "reason": "a bug"})
    args = {"agent_type": "debug", "reason": "a bug"}
    assert await system_tools(port).run(call, port.agents.get("coder"), args) is False
    assert port.kinds() == ["complete", "switch"]
    assert port.moves[1] == ("switch", SID, "debug", "handoff")


async def test_a_followup_question_is_shown_and_the_session_waits_for_the_user(
    port: FakePort,
) -> None:
    call = await proposed(port, "ask_followup_question", {"question": "Which file?"})
    args = {"question": "Which file?"}
    assert await system_tools(port).run(call, port.agents.get("coder"), args) is True
    assert port.kinds() == ["emit:assistant_message", "complete", "close_open_calls", "emit:done"]
    assert port.moves[0][3].assistant_message.content == "Which file?"
    assert port.moves[-1][3].done.status == "awaiting_user"


@pytest.mark.parametrize("plan_goes_on", [False, True])
async def test_completion_finishes_the_task_unless_a_plan_goes_on(
    port: FakePort, plan_goes_on: bool
) -> None:
    port.finish_goes_on = plan_goes_on
    call = await proposed(port, "attempt_completion", {"result": "Done."})
    waits = await system_tools(port).run(call, port.agents.get("coder"), {"result": "Done."})
    assert waits is (not plan_goes_on)
    assert port.kinds()[-1] == "finish"
    assert port.moves[-1] == ("finish", SID, "coder", "Done.")


async def test_tool_search_lists_what_it_found_and_pins_it_for_the_instance(
    port: FakePort,
) -> None:
    scratch: dict[str, Any] = {}
    token = SCRATCH.set(scratch)
    try:
        call = await proposed(port, "tool_search", {"query": "grep"})
        tools = system_tools(port, found=["search_in_code", "not_offered"])
        assert await tools.run(call, port.agents.get("coder"), {"query": "grep"}) is False
    finally:
        SCRATCH.reset(token)
    listing = json.loads(port.moves[-1][3])
    assert listing == [{"name": "search_in_code", "description": "Search the code"}]
    assert scratch["pinned_tools"] == {"search_in_code"}


def test_a_delegated_task_reads_task_then_context_then_constraints() -> None:
    text = task_text({"constraints": "no new deps", "task": "Fix it", "context": "CI red"})
    assert text == "Fix it\n\nContext: CI red\n\nConstraints: no new deps"
    assert task_text({"task": "Only this", "context": ""}) == "Only this"


async def test_delegation_runs_the_task_in_a_child_and_returns_its_answer(
    port: FakePort,
) -> None:
    delegation = Delegation(port, port.store, port.ledger)
    call = await proposed(port, "agent.ask", {"task": "Explain X"})
    assert await delegation.run(call, port.agents.get("coder"), {"task": "Explain X"}) is True
    child = f"{SID}.{call.call_id}"
    assert await state_of(port, call) == "delegated"
    assert [(m.role, m.content) for m in await port.store.history(child)] == [("user", "Explain X")]
    assert (await port.store.get_session(child)).current_agent == "ask"
    assert port.kinds() == ["emit:agent_chain_update", "advance"]
    assert port.moves[-1] == ("advance", child)
    port.moves.clear()
    await delegation.finished(child, "X is a thing.")
    assert port.kinds() == [
        "complete",
        "emit:agent_chain_update",
        "emit:execution_completed",
        "advance",
    ]
    assert port.moves[0] == ("complete", call.call_id, "completed", "X is a thing.")
    assert port.moves[-1] == ("advance", SID)
    port.moves.clear()
    await delegation.finished(child, "again")  # the call is answered: nothing more
    assert port.moves == []


def plans(port: FakePort) -> PlanRunner:
    # Decisions ask hitl to audit (tested through the mesh); proposing and stepping do not.
    return PlanRunner(port, port.ledger, port.store, cast(HitlClient, None), port.agents)


PLAN = {
    "goal": "Fix the login bug",
    "subtasks": [
        {"description": "Find the cause", "agent": "debug", "estimated_time": "10 min"},
        {"description": "Fix it", "agent": "coder"},
    ],
}


async def test_create_plan_waits_for_the_humans_decision(port: FakePort) -> None:
    call = await proposed(port, "create_plan", PLAN)
    assert await plans(port).run(call, port.agents.get("orchestrator"), PLAN) is True
    assert await state_of(port, call) == "awaiting_approval"
    assert port.kinds() == ["emit:plan_approval_required", "emit:plan_update", "emit:done"]
    asked = port.moves[0][3].plan_approval_required.plan_summary
    assert (asked.goal, asked.subtasks_count, asked.total_estimated_time) == (
        "Fix the login bug",
        2,
        "15 min",
    )
    assert port.moves[-1][3].done.status == "awaiting_plan_approval"
    [waiting] = await port.ledger.pending_plans(SID)
    assert [s["agent"] for s in waiting.steps] == ["debug", "coder"]


async def test_a_plan_with_an_unknown_agent_is_refused_to_the_model(port: FakePort) -> None:
    bad = {"goal": "g", "subtasks": [{"description": "d", "agent": "nobody"}]}
    call = await proposed(port, "create_plan", bad)
    assert await plans(port).run(call, port.agents.get("orchestrator"), bad) is False
    assert port.moves == [
        ("complete", call.call_id, "failed", "Error: unknown agents in the plan: ['nobody']")
    ]


async def running_plan(port: FakePort) -> PlanRunner:
    """PLAN proposed, approved and at its first step; the moves so far forgotten."""
    runner = plans(port)
    call = await proposed(port, "create_plan", PLAN)
    await runner.run(call, port.agents.get("orchestrator"), PLAN)
    [plan] = await port.ledger.pending_plans(SID)
    plan.status = "running"
    await runner.start_step(plan, 0)
    port.moves.clear()
    return runner


async def test_each_answer_starts_the_next_step_and_the_last_completes_the_plan(
    port: FakePort,
) -> None:
    runner = await running_plan(port)
    assert await runner.agent_finished(SID, "The cause is X.") is True
    assert ("switch", SID, "coder", "plan") in port.moves
    assert (await port.store.history(SID))[-1].content.startswith("Plan step 2 of 2")
    port.moves.clear()
    assert await runner.agent_finished(SID, "Fixed.") is False
    done = [m[3] for m in port.moves if m[2] == "execution_completed"]
    assert [d.execution_completed.status for d in done] == ["completed"]
    assert "The cause is X." in done[0].execution_completed.summary
    assert await port.ledger.running_plan(SID) is None
    assert await runner.agent_finished(SID, "no plan runs") is False


async def test_a_failure_ends_the_running_plan_with_its_reason(port: FakePort) -> None:
    runner = await running_plan(port)
    await runner.fail_running(SID, "the model is away")
    progress = [m[3].plan_progress for m in port.moves if m[2] == "plan_progress"]
    assert [(p.status, p.result) for p in progress] == [("error", "the model is away")]
    assert await port.ledger.running_plan(SID) is None
