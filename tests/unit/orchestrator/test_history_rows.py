"""A history's rows become messages, and messages a model request, in bulk: the same values
the one-at-a-time constructors give."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import pytest

from codelab.v1 import llmproxy_pb2 as pb
from services.orchestrator.peers.llm import add_messages, to_proto
from services.orchestrator.state.store import (
    _CONTEXT_FIELDS,
    StoredMessage,
    context_of,
    stored_messages,
)

AT = dt.datetime(2026, 11, 29, 1, 30, tzinfo=dt.UTC)
CALLS = [{"id": "c1", "name": "read_file", "arguments": '{"path": "a.py"}'}]

MESSAGES = [
    StoredMessage("user", "read a.py", created_at=AT, tokens=3, id=7),
    StoredMessage(
        "assistant",
        "",
        tool_calls=CALLS,
        created_at=AT,
        reasoning="the file first",
        tokens=9,
        id=8,
        reasoning_tokens=4,
    ),
    StoredMessage("tool", "print(1)", name="read_file", tool_call_id="c1", tokens=2, id=9),
    StoredMessage("summary", "earlier: a plan", covers_from=1, covered=6),
]


def row_of(message: StoredMessage) -> tuple[object, ...]:
    """``message`` as ``turn_context`` returns it: its columns, then the hand-over's."""
    return (*(getattr(message, name) for name in _CONTEXT_FIELDS), None)


def test_a_context_read_gives_the_messages_the_constructor_gives() -> None:
    handover = {"previous_agent": "architect"}
    rows = [(None,) * len(_CONTEXT_FIELDS) + (handover,), *map(row_of, MESSAGES)]
    messages, context = context_of(rows)
    assert messages == MESSAGES
    assert [vars(m) for m in messages] == [vars(m) for m in MESSAGES]  # compare=False too
    assert context == handover


def test_a_history_read_leaves_what_it_does_not_select_at_its_default() -> None:
    names = ["id", "role", "content", "tokens"]
    [message] = stored_messages(names, [(5, "user", "hi", 1)])
    assert vars(message) == vars(StoredMessage("user", "hi", tokens=1, id=5))


def test_a_message_built_in_bulk_is_frozen() -> None:
    [message] = stored_messages(_CONTEXT_FIELDS, [row_of(MESSAGES[0])])
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["role", "content", "colour"], "unknown ['colour']"),
        (["role", "tokens"], "missing ['content']"),
    ],
)
def test_columns_that_are_not_a_message_are_refused(names: list[str], says: str) -> None:
    with pytest.raises(TypeError, match=re.escape(says)):
        stored_messages(names, [("user", "x", "y")])


@pytest.mark.parametrize("with_reasoning", [False, True])
def test_a_request_built_in_place_carries_what_to_proto_makes(with_reasoning: bool) -> None:
    request = pb.CompleteRequest(session_id="s")
    add_messages(request.messages, MESSAGES, with_reasoning)
    assert list(request.messages) == [to_proto(m, with_reasoning) for m in MESSAGES]
    assert request.messages[1].tool_calls[0].arguments_json == '{"path": "a.py"}'
    assert request.messages[1].reasoning == ("the file first" if with_reasoning else "")
    assert request.messages[2].name == "read_file"
