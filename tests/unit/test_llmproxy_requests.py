"""llmproxy's translation of a CompleteRequest's tools into the OpenAI request."""

from __future__ import annotations

import pytest

from codelab.v1 import llmproxy_pb2 as pb
from services.common.errors import InvalidInput
from services.llmproxy.servicer import request_names, tool_to_openai
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


def test_a_tool_is_built_once_for_each_name_it_goes_out_under() -> None:
    tool = pb.ToolDefinition(name="git.diff", description="d", parameters_json='{"type": "object"}')
    alone, crowded = ToolNames(["git.diff"]), ToolNames(["git.diff", "git_diff"])
    assert tool_to_openai(tool, alone) is tool_to_openai(tool, ToolNames(["git.diff"]))
    other = tool_to_openai(tool, crowded)  # another wire name: another value
    assert other["function"]["name"] == crowded.to_wire("git.diff") != "git_diff"
    assert other["function"]["name"] != tool_to_openai(tool, alone)["function"]["name"]


def test_a_requests_names_come_from_its_tools_calls_and_results() -> None:
    def request(*tools: str, called: str = "") -> pb.CompleteRequest:
        asked = pb.ChatMessage(role="assistant")
        if called:
            asked.tool_calls.add(id="c1", name=called, arguments_json="{}")
        result = pb.ChatMessage(role="tool", content="ok", tool_call_id="c1")
        if called:
            result.name = called
        return pb.CompleteRequest(
            messages=[pb.ChatMessage(role="user", content="hi"), asked, result],
            tools=[pb.ToolDefinition(name=t) for t in tools],
        )

    names = request_names(request("read_file", "git.diff", called="mcp.fs/read"))
    assert names.to_wire("mcp.fs/read") != "mcp.fs/read"
    assert names.to_catalog(names.to_wire("mcp.fs/read")) == "mcp.fs/read"
    # The same set of names, in another order: the same map, built once.
    assert request_names(request("git.diff", "read_file", called="mcp.fs/read")) is names
    assert request_names(request("git.diff", "read_file")) is not names
