"""llmproxy's translation of a CompleteRequest's tools into the OpenAI request."""

from __future__ import annotations

import pytest

from codelab.v1 import llmproxy_pb2 as pb
from services.common.errors import InvalidInput
from services.llmproxy.servicer import tool_to_openai
from services.llmproxy.tool_names import ToolNames


def test_a_tool_carries_its_parsed_schema_under_its_wire_name() -> None:
    tool = pb.ToolDefinition(
        name="git.diff", description="d", parameters_json='{"type": "object", "required": []}'
    )
    names = ToolNames(["git.diff"])
    first, again = tool_to_openai(tool, names), tool_to_openai(tool, names)
    assert (
        first
        == again
        == {
            "type": "function",
            "function": {
                "name": names.to_wire("git.diff"),
                "description": "d",
                "parameters": {"type": "object", "required": []},
            },
        }
    )
    assert names.to_wire("git.diff") != "git.diff"


def test_a_schema_that_is_not_json_is_refused_every_time() -> None:
    tool = pb.ToolDefinition(name="broken", parameters_json="{nope")
    for _ in range(2):  # a failure is not remembered as a value
        with pytest.raises(InvalidInput, match="broken: parameters_json is not JSON"):
            tool_to_openai(tool, ToolNames(["broken"]))


def test_no_schema_is_an_empty_object() -> None:
    parsed = tool_to_openai(pb.ToolDefinition(name="t"), ToolNames(["t"]))
    assert parsed["function"]["parameters"] == {}
