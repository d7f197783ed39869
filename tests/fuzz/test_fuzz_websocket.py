"""WebSocket frames, fuzzed: whatever the IDE sends, it gets events with the seed's error
codes (never INTERNAL_ERROR) and the socket stays open; the parser only ever raises
ProtocolError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from codelab.v1 import common_pb2 as pb
from services.gateway.errors import ProtocolError
from services.gateway.translate import PARSERS, parse_text
from tests.fuzz.conftest import FUZZ
from tests.support.mesh import Mesh

CODES = set(pb.ErrorCode.keys()) - {"ERROR_CODE_UNSPECIFIED", "INTERNAL_ERROR"}
FIELDS = [
    "content", "role", "agent_type", "call_id", "tool_call_id", "result", "tool_result",
    "error", "decision", "action", "modified_arguments", "edited_arguments", "feedback",
    "approval_request_id", "reason", "plan_id", "step_id", "client_message_id",
]  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
messages = st.fixed_dictionaries(
    {"type": st.sampled_from([*PARSERS, "nope", ""]) | json_values},
    optional={name: json_values | st.text(max_size=20) for name in FIELDS},
)
frames = (
    messages.map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=60)
    | st.binary(max_size=30).map(lambda b: b.decode("utf-8", "replace"))
)


@FUZZ
@given(frames)
def test_the_parser_answers_any_frame_with_a_message_or_a_protocol_error(frame: str) -> None:
    try:
        parsed = parse_text(frame)
    except ProtocolError as error:
        assert error.code in CODES
    else:
        assert parsed.WhichOneof("message") in {
            "user_message", "tool_result", "switch_agent", "hitl_decision",
            "plan_decision", "cancel",
        }  # fmt: skip


@pytest.fixture
def socket(fuzz_mesh: Mesh) -> Iterator[ClientConnection]:
    with connect(fuzz_mesh.ws_url("fuzz-ws"), open_timeout=10) as ws:
        yield ws


def answered(ws: ClientConnection, sentinel: str) -> list[dict[str, Any]]:
    """Events up to the ``done`` of the sentinel cancel sent after the frame."""
    seen: list[dict[str, Any]] = []
    while True:
        try:
            event = json.loads(ws.recv(timeout=30))
        except TimeoutError:
            raise AssertionError(f"no answer; seen {seen}") from None
        seen.append(event)
        if event["type"] == "done" and event.get("status") == "cancelled":
            return seen
        if event["type"] == "done" and event.get("client_message_id") == sentinel:
            return seen  # the sentinel was a duplicate: its cancel's done came already


@FUZZ
@given(frame=frames, n=st.integers(0, 10**9))
def test_any_frame_gets_seed_error_codes_and_the_socket_stays_open(
    socket: ClientConnection, frame: str, n: int
) -> None:
    socket.send(frame)
    sentinel = f"sentinel-{n}"
    socket.send(json.dumps({"type": "cancel", "client_message_id": sentinel}))
    for event in answered(socket, sentinel):
        if event["type"] == "error":
            assert event["error_code"] in CODES, event
