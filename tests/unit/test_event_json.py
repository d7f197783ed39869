"""The hot-path event renderer gives exactly what the generic proto printer gives."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from codelab.v1 import common_pb2 as pb
from services.gateway.event_json import dumps, event_json, payload_json
from services.gateway.render import proto_json

KINDS = [f.name for f in pb.ServerEvent.DESCRIPTOR.oneofs_by_name["event"].fields]


def fill(message: Message, rng: random.Random, depth: int = 0) -> None:
    """Random values in a random subset of the fields (nested and repeated included)."""
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue  # left unset: optional ones must then be absent
        repeated = field.is_repeated
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth < 2:
                for _ in range(rng.randint(1, 2) if repeated else 1):
                    child = getattr(message, field.name).add() if repeated else None
                    fill(child or getattr(message, field.name), rng, depth + 1)
            continue
        values = [_value(field, rng) for _ in range(rng.randint(0, 3) if repeated else 1)]
        if repeated:
            getattr(message, field.name).extend(values)
        else:
            setattr(message, field.name, values[0])


def _value(field: Any, rng: random.Random) -> Any:
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_ENUM:
        return rng.choice(field.enum_type.values).number
    if field.cpp_type in (
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
    ):
        return rng.randint(0, 1000)
    if field.name.endswith("_json"):
        return rng.choice(['{"a": [1, "x"]}', "not json", "", "null", '"é"'])
    return "".join(rng.choice(string.printable + "ёжик") for _ in range(rng.randint(0, 12)))


@pytest.mark.parametrize("kind", KINDS)
def test_every_event_type_renders_as_the_generic_printer_does(kind: str) -> None:
    rng = random.Random(kind)
    for _ in range(200):
        event = pb.ServerEvent(session_id="s", seq=rng.randint(1, 10**6), timestamp="t")
        payload = getattr(event, kind)
        payload.SetInParent()
        fill(payload, rng)
        assert payload_json(payload) == proto_json(payload)
        rendered = event_json(event)
        assert rendered == {
            "type": kind,
            **proto_json(payload),
            "session_id": "s",
            "seq": event.seq,
            "timestamp": "t",
        }


def test_a_token_keeps_non_ascii_text_as_is() -> None:
    event = pb.ServerEvent(
        seq=3, assistant_message=pb.AssistantMessage(token="Привет ✓", is_final=False)
    )
    assert '"token":"Привет ✓"' in dumps(event_json(event))


def test_an_event_without_a_type_is_refused() -> None:
    with pytest.raises(ValueError, match="without a type"):
        event_json(pb.ServerEvent(seq=1))


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            pb.ServerEvent(
                execution_completed=pb.ExecutionCompleted(
                    kind="plan", execution_id="plan_1", status="completed", summary="1. ok"
                )
            ),
            {"kind": "plan", "execution_id": "plan_1", "status": "completed", "summary": "1. ok"},
        ),
        (
            pb.ServerEvent(
                plan_modification_requested=pb.PlanModificationRequested(
                    content="c", plan_id="p", approval_request_id="r", planner="coder"
                )
            ),
            {"content": "c", "plan_id": "p", "approval_request_id": "r", "planner": "coder"},
        ),
        (
            pb.ServerEvent(
                status=pb.CallStatus(
                    call_id="call_1", status="edited_by_human", tool_name="w", feedback="f"
                )
            ),
            {"call_id": "call_1", "status": "edited_by_human", "tool_name": "w", "feedback": "f"},
        ),
    ],
)
def test_the_seed_002_and_004_events_render_flat(
    event: pb.ServerEvent, expected: dict[str, Any]
) -> None:
    kind = event.WhichOneof("event")
    assert kind in KINDS
    rendered = event_json(event)
    assert rendered == {"type": kind, **expected, "session_id": "", "seq": 0, "timestamp": ""}
    assert payload_json(getattr(event, kind)) == proto_json(getattr(event, kind))
