"""The IDE's messages (seed 002's WebSocket shapes, seed 004's hitl_response, seed 000's
flat stream body) become ClientMessages; anything else is a ProtocolError with the spec's
code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format

from codelab.v1 import common_pb2 as pb
from services.gateway.errors import ProtocolError
from services.gateway.translate import (
    local_error,
    normalise_stream_body,
    parse_client_message,
    parse_text,
    with_idempotency_key,
)


def parsed(raw: dict[str, Any]) -> dict[str, Any]:
    """The ClientMessage of ``raw`` as a dict (proto names, enums by name)."""
    return json_format.MessageToDict(parse_client_message(raw), preserving_proto_field_name=True)


def refused(raw: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as error:
        parse_text(raw) if isinstance(raw, str) else parse_client_message(raw)
    return error.value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (  # seed 002, 1
            {"type": "user_message", "content": "Создай новый файл main.py", "role": "user"},
            {"user_message": {"content": "Создай новый файл main.py", "role": "user"}},
        ),
        (
            {"type": "user_message", "content": "hi", "agent_type": "ask"},
            {"user_message": {"content": "hi", "role": "user", "agent_type": "ask"}},
        ),
        (  # seed 002, 2 (a result keeps integers exact)
            {"type": "tool_result", "call_id": "c1", "result": {"n": 1}, "error": None},
            {"tool_result": {"call_id": "c1", "result_json": '{"n": 1}'}},
        ),
        (  # seed 004, 6
            {"type": "tool_result", "call_id": "c1", "result": {}, "plan_id": "p", "step_id": "1"},
            {"tool_result": {"call_id": "c1", "result_json": "{}", "plan_id": "p", "step_id": "1"}},
        ),
        (
            {"type": "tool_result", "tool_call_id": "c1", "error": {"code": 2}},
            {"tool_result": {"call_id": "c1", "error": '{"code": 2}'}},
        ),
        (  # seed 002, 3
            {"type": "switch_agent", "agent_type": "coder", "content": "go", "reason": "User"},
            {"switch_agent": {"agent_type": "coder", "content": "go", "reason": "User"}},
        ),
        (  # seed 002, 4
            {"type": "hitl_decision", "call_id": "c1", "decision": "approve", "feedback": None},
            {"hitl_decision": {"call_id": "c1", "decision": "DECISION_APPROVE"}},
        ),
        (
            {
                "type": "hitl_decision",
                "call_id": "c1",
                "decision": "edit",
                "modified_arguments": {"path": "b.py"},
                "feedback": "renamed",
            },
            {
                "hitl_decision": {
                    "call_id": "c1",
                    "decision": "DECISION_EDIT",
                    "modified_arguments_json": '{"path": "b.py"}',
                    "feedback": "renamed",
                }
            },
        ),
        (  # seed 004's spelling
            {
                "type": "hitl_response",
                "call_id": "call_999",
                "action": "edit",
                "edited_arguments": {"content": "new"},
                "feedback": "commented",
            },
            {
                "hitl_decision": {
                    "call_id": "call_999",
                    "decision": "DECISION_EDIT",
                    "modified_arguments_json": '{"content": "new"}',
                    "feedback": "commented",
                }
            },
        ),
        (  # seed 002, 5
            {"type": "plan_decision", "approval_request_id": "r1", "decision": "modify"},
            {"plan_decision": {"approval_request_id": "r1", "decision": "DECISION_MODIFY"}},
        ),
        (
            {"type": "cancel", "client_message_id": "m-1"},
            {"cancel": {}, "client_message_id": "m-1"},
        ),
    ],
)
def test_every_ide_message_type_becomes_its_client_message(
    raw: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert parsed(raw) == expected
    assert parse_text(json.dumps(raw)) == parse_client_message(raw)


@pytest.mark.parametrize("spelling", ["APPROVE", "approved", " Reject ", "rejected", "edited"])
def test_decisions_are_read_in_any_case_and_tense(spelling: str) -> None:
    message = parse_client_message({"type": "hitl_decision", "call_id": "c", "decision": spelling})
    assert message.hitl_decision.decision in {
        pb.DECISION_APPROVE,
        pb.DECISION_REJECT,
        pb.DECISION_EDIT,
    }


@pytest.mark.parametrize(
    ("raw", "code", "says"),
    [
        ("{not json", "INVALID_MESSAGE", "Invalid JSON message"),
        ("[1, 2]", "INVALID_MESSAGE", "JSON object"),
        ("42", "INVALID_MESSAGE", "JSON object"),
        ({"content": "no type"}, "MISSING_REQUIRED_FIELD", "'type'"),
        ({"type": "teleport"}, "INVALID_MESSAGE_TYPE", "teleport"),
        ({"type": 5}, "INVALID_MESSAGE_TYPE", "5"),
        ({"type": "user_message"}, "MISSING_REQUIRED_FIELD", "'content'"),
        ({"type": "user_message", "content": 5}, "MISSING_REQUIRED_FIELD", "string"),
        ({"type": "user_message", "content": "x", "role": "god"}, "MISSING_REQUIRED_FIELD", "role"),
        ({"type": "tool_result", "result": {}}, "MISSING_REQUIRED_FIELD", "'call_id'"),
        ({"type": "switch_agent", "content": "x"}, "MISSING_REQUIRED_FIELD", "'agent_type'"),
        ({"type": "hitl_decision", "call_id": "c"}, "MISSING_REQUIRED_FIELD", "'decision'"),
        (
            {"type": "hitl_decision", "call_id": "c", "decision": "modify"},
            "INVALID_DECISION",
            "['approve', 'edit', 'reject']",
        ),
        (
            {"type": "hitl_decision", "call_id": "c", "decision": "edit", "modified_arguments": []},
            "MISSING_REQUIRED_FIELD",
            "object",
        ),
        (  # seed 002's example of a validation error
            {"type": "plan_decision", "call_id": "c", "decision": "approve"},
            "MISSING_REQUIRED_FIELD",
            "plan_decision requires 'approval_request_id' and 'decision' fields",
        ),
        (
            {"type": "plan_decision", "approval_request_id": "r", "decision": "edit"},
            "INVALID_DECISION",
            "['approve', 'modify', 'reject']",
        ),
        ({"type": "cancel", "client_message_id": ""}, "MISSING_REQUIRED_FIELD", "1-200"),
        ({"type": "cancel", "client_message_id": 7}, "MISSING_REQUIRED_FIELD", "1-200"),
        ({"type": "cancel", "client_message_id": "x" * 201}, "MISSING_REQUIRED_FIELD", "1-200"),
    ],
)
def test_bad_input_is_a_protocol_error_with_the_seeds_code(raw: Any, code: str, says: str) -> None:
    error = refused(raw)
    assert error.code == code
    assert says in error.message
    pb.ErrorCode.Value(code)  # a code of the protocol


def test_the_idempotency_key_header_is_the_client_message_id() -> None:
    message = parse_client_message({"type": "cancel"})
    assert not message.HasField("client_message_id")
    assert with_idempotency_key(message, {"Idempotency-Key": "k-1"}).client_message_id == "k-1"
    with pytest.raises(ProtocolError, match="Idempotency-Key"):
        with_idempotency_key(message, {"Idempotency-Key": ""})


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"session_id": "s", "message": "Создай функцию", "message_type": "user_message"},
            {"user_message": {"content": "Создай функцию", "role": "user"}},
        ),
        (
            {"session_id": "s", "message": "go", "agent_type": "coder"},
            {"user_message": {"content": "go", "role": "user", "agent_type": "coder"}},
        ),
        (
            {
                "session_id": "s",
                "message_type": "tool_result",
                "tool_call_id": "call-abc-123",
                "tool_result": "File created successfully",
            },
            {
                "tool_result": {
                    "call_id": "call-abc-123",
                    "result_json": '"File created successfully"',
                }
            },
        ),
        (
            {
                "session_id": "s",
                "message": "Switch",
                "message_type": "switch_agent",
                "agent_type": "debug",
            },
            {"switch_agent": {"agent_type": "debug", "content": "Switch"}},
        ),
        (
            {
                "session_id": "s",
                "message_type": "hitl_decision",
                "tool_call_id": "call-abc-123",
                "hitl_decision": {
                    "decision": "EDIT",
                    "modified_args": {"path": "utils/sorting.py"},
                },
            },
            {
                "hitl_decision": {
                    "call_id": "call-abc-123",
                    "decision": "DECISION_EDIT",
                    "modified_arguments_json": '{"path": "utils/sorting.py"}',
                }
            },
        ),
        (  # seed 001/002: the message nested, its id given beside it
            {"session_id": "s", "client_message_id": "m1", "message": {"type": "cancel"}},
            {"cancel": {}, "client_message_id": "m1"},
        ),
    ],
)
def test_a_stream_body_of_either_seed_becomes_its_message(
    body: dict[str, Any], expected: dict[str, Any]
) -> None:
    session_id, raw = normalise_stream_body(body)
    assert session_id == "s"
    assert parsed(raw) == expected


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ([], "INVALID_MESSAGE"),
        ({"message": "hi"}, "MISSING_REQUIRED_FIELD"),
        ({"session_id": "", "message": "hi"}, "MISSING_REQUIRED_FIELD"),
        (
            {"session_id": "s", "message_type": "hitl_decision", "hitl_decision": "yes"},
            "MISSING_REQUIRED_FIELD",
        ),
    ],
)
def test_a_bad_stream_body_is_refused(body: Any, code: str) -> None:
    with pytest.raises(ProtocolError) as error:
        normalise_stream_body(body)
    assert error.value.code == code


def test_the_gateways_own_error_has_the_event_shape() -> None:
    assert local_error("LLM_TIMEOUT", "no answer", "s1", {"after": 30}) == {
        "type": "error",
        "error_code": "LLM_TIMEOUT",
        "content": "no answer",
        "session_id": "s1",
        "details": {"after": 30},
    }
    assert "details" not in local_error("SERVICE_UNAVAILABLE", "down", "s1")
