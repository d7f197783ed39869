"""Every event the runtime sends, as the IDE reads it: the shapes of seeds 001, 002 and
004, made from the runtime's own event constructors and stamped as the hub stamps them."""

from __future__ import annotations

from typing import Any

import pytest

from codelab.v1 import common_pb2 as pb
from services.gateway.translate import event_to_json
from services.orchestrator.state import events

WHEN = "2026-01-20T10:00:00.000+00:00"
STAMP: dict[str, Any] = {"session_id": "sess_1", "seq": 7, "timestamp": WHEN}


def shown(event: pb.ServerEvent) -> dict[str, Any]:
    event.session_id, event.seq, event.timestamp = "sess_1", 7, WHEN
    return event_to_json(event)


def streamed(token: str) -> pb.ServerEvent:
    message = pb.AssistantMessage(token=token, is_final=False, agent="coder", message_id="msg_1")
    return pb.ServerEvent(assistant_message=message)


CASES: list[tuple[str, pb.ServerEvent, dict[str, Any]]] = [
    (
        "seed 001 4.2: a streamed token",
        streamed("import"),
        {"type": "assistant_message", "token": "import", "is_final": False, "agent": "coder",
         "message_id": "msg_1"},
    ),
    (
        "seed 001 4.2: the end of a streamed answer has no token",
        events.assistant_final("coder", "msg_1"),
        {"type": "assistant_message", "is_final": True, "agent": "coder", "message_id": "msg_1"},
    ),
    (
        "seed 002: a whole message in content",
        events.assistant_content("Готово", "ask", "msg_2"),
        {"type": "assistant_message", "content": "Готово", "is_final": True, "agent": "ask",
         "message_id": "msg_2"},
    ),
    (
        "seed 004: a tool call that waits for approval, in a plan's step",
        events.tool_call(
            "call_999", "write_file", {"path": "main.py", "lines": 3}, requires_approval=True,
            reason="writes a file", agent="coder", plan_id="plan-abc", step_id="3",
        ),
        {"type": "tool_call", "call_id": "call_999", "tool_name": "write_file",
         "arguments": {"path": "main.py", "lines": 3}, "requires_approval": True,
         "reason": "writes a file", "agent": "coder", "plan_id": "plan-abc", "step_id": "3"},
    ),
    (
        "seed 001 5: a tool call without a plan",
        events.tool_call("call_77", "read_file", {"path": "src/main.dart"},
                         requires_approval=False, reason=None, agent="coder"),
        {"type": "tool_call", "call_id": "call_77", "tool_name": "read_file",
         "arguments": {"path": "src/main.dart"}, "requires_approval": False, "agent": "coder"},
    ),
    (
        "seed 002: agent_switched",
        events.agent_switched("orchestrator", "coder", "Coding task detected", "high"),
        {"type": "agent_switched", "content": "Switched to coder agent",
         "from_agent": "orchestrator", "to_agent": "coder", "reason": "Coding task detected",
         "confidence": "high"},
    ),
    (
        "seed 002: plan_approval_required",
        events.plan_approval_required("plan-xyz789", "plan-approval-abc123",
                                      "Create Flutter login form", 4, "20 min"),
        {"type": "plan_approval_required", "content": "Plan requires your approval",
         "approval_request_id": "plan-approval-abc123", "plan_id": "plan-xyz789",
         "plan_summary": {"goal": "Create Flutter login form", "subtasks_count": 4,
                          "total_estimated_time": "20 min"}},
    ),
    (
        "seed 004 3: plan_update",
        events.plan_update("plan-6ca1", [
            {"id": "1", "desc": "Анализ main.py", "status": "pending", "agent": "ask"},
            {"id": "2", "desc": "Сгенерировать рефакторинг", "status": "blocked"},
        ], "1"),
        {"type": "plan_update", "plan_id": "plan-6ca1", "current_step": "1", "steps": [
            {"id": "1", "desc": "Анализ main.py", "status": "pending", "agent": "ask"},
            {"id": "2", "desc": "Сгенерировать рефакторинг", "status": "blocked"},
        ]},
    ),
    (
        "seed 004 4: plan_progress",
        events.plan_progress("plan-6ca1", "1", "main.py прочитан.", "done"),
        {"type": "plan_progress", "plan_id": "plan-6ca1", "step_id": "1",
         "result": "main.py прочитан.", "status": "done"},
    ),
    (
        "seed 004 7: agent_chain_update",
        events.agent_chain_update("chain-xyz", [("refactorer", "refactor", "done"),
                                                ("tester", "test", "pending")], "tester"),
        {"type": "agent_chain_update", "chain_id": "chain-xyz", "current_agent": "tester",
         "agents": [{"agent_id": "refactorer", "role": "refactor", "status": "done"},
                    {"agent_id": "tester", "role": "test", "status": "pending"}]},
    ),
    (
        "seed 004 8: an error with its context and seed 000's code and details",
        events.error("FILE_RESTRICTION_ERROR", "Architect agent cannot edit non-.md files",
                     {"file_path": "src/main.py", "allowed_patterns": ["\\.md$"]},
                     plan_id="plan-6ca1", step_id="2"),
        {"type": "error", "content": "Architect agent cannot edit non-.md files",
         "error_code": "FILE_RESTRICTION_ERROR",
         "details": {"file_path": "src/main.py", "allowed_patterns": ["\\.md$"]},
         "context": {"plan_id": "plan-6ca1", "step_id": "2"}},
    ),
    (
        "a refused client message names its id",
        events.refused("TURN_IN_PROGRESS", "a turn is running", "m-9"),
        {"type": "error", "content": "a turn is running", "error_code": "TURN_IN_PROGRESS",
         "client_message_id": "m-9"},
    ),
    (
        "seed 002 6: done",
        events.done(),
        {"type": "done", "is_final": True, "status": "completed"},
    ),
    (
        "a repeated client message: done duplicate and where its events start",
        events.duplicate("m-1", 12),
        {"type": "done", "is_final": True, "status": "duplicate", "client_message_id": "m-1",
         "first_seq": 12},
    ),
    (
        "seed 004: a call's HITL status",
        events.call_status("call_999", "edited_by_human", "write_file", feedback="dop"),
        {"type": "status", "call_id": "call_999", "status": "edited_by_human",
         "tool_name": "write_file", "feedback": "dop"},
    ),
    (
        "seed 002: plan_rejected",
        events.plan_rejected("plan-1", "r-1", None),
        {"type": "plan_rejected", "content": "Plan rejected", "plan_id": "plan-1",
         "approval_request_id": "r-1"},
    ),
    (
        "seed 002: execution_completed",
        events.execution_completed("plan", "plan-1", "completed", "1. ok", plan_id="plan-1"),
        {"type": "execution_completed", "kind": "plan", "execution_id": "plan-1",
         "status": "completed", "summary": "1. ok", "plan_id": "plan-1"},
    ),
    (
        "seed 002: the person asked for another plan",
        events.plan_modification_requested("plan-1", "r-1", "architect", "fewer steps"),
        {"type": "plan_modification_requested",
         "content": "Plan modification requested; architect revises the plan",
         "plan_id": "plan-1", "approval_request_id": "r-1", "feedback": "fewer steps",
         "planner": "architect"},
    ),
    (
        "reasoning before an answer",
        pb.ServerEvent(reasoning=pb.Reasoning(token="думаю", message_id="msg_1", agent="coder")),
        {"type": "reasoning", "token": "думаю", "message_id": "msg_1", "agent": "coder"},
    ),
    (
        "older turns summarised",
        pb.ServerEvent(context_compacted=pb.ContextCompacted(messages=12, tokens_before=9000,
                                                             tokens_after=2100)),
        {"type": "context_compacted", "messages": 12, "tokens_before": 9000, "tokens_after": 2100},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("event", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_event_has_the_seeds_shape(event: pb.ServerEvent, expected: dict[str, Any]) -> None:
    assert shown(event) == {**expected, **STAMP}


def test_every_event_type_of_the_protocol_has_a_shape_here() -> None:
    kinds = {f.name for f in pb.ServerEvent.DESCRIPTOR.oneofs_by_name["event"].fields}
    covered = {c[1].WhichOneof("event") for c in CASES}
    assert kinds == covered


def test_broken_model_arguments_are_shown_as_the_raw_text() -> None:
    event = pb.ServerEvent(
        tool_call=pb.ToolCall(call_id="c", tool_name="t", arguments_json="{oops")
    )
    assert shown(event)["arguments"] == "{oops"
