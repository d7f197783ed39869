"""Catalog tool names <-> names an OpenAI-compatible upstream accepts."""

from __future__ import annotations

import random
import re
import string

from codelab.v1 import llmproxy_pb2 as pb
from services.llmproxy.servicer import request_from_proto, request_names
from services.llmproxy.tool_names import ToolNames, is_valid

WIRE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_valid_names_are_kept() -> None:
    names = ToolNames(["read_file", "run-command", "X9"])
    assert [names.to_wire(n) for n in ("read_file", "run-command", "X9")] == [
        "read_file",
        "run-command",
        "X9",
    ]
    assert names.renamed == {}


def test_dotted_names_become_readable_and_come_back() -> None:
    names = ToolNames(["git.diff", "agent.ask", "read_file"])
    assert names.to_wire("git.diff") == "git_diff"
    assert names.to_wire("agent.ask") == "agent_ask"
    assert names.to_catalog("git_diff") == "git.diff"
    assert names.to_catalog("agent_ask") == "agent.ask"
    assert names.to_catalog("read_file") == "read_file"


def test_a_sanitised_name_never_takes_another_tools_name() -> None:
    names = ToolNames(["git.diff", "git_diff", "git diff"])
    wires = {n: names.to_wire(n) for n in ("git.diff", "git_diff", "git diff")}
    assert wires["git_diff"] == "git_diff"
    assert len(set(wires.values())) == 3
    assert all(WIRE.match(w) for w in wires.values())
    assert {names.to_catalog(w) for w in wires.values()} == set(wires)


def test_long_names_are_cut_with_a_hash_and_stay_distinct() -> None:
    a, b = "mcp." + "x" * 80 + ".one", "mcp." + "x" * 80 + ".two"
    names = ToolNames([a, b])
    assert names.to_wire(a) != names.to_wire(b)
    assert all(len(names.to_wire(n)) <= 64 for n in (a, b))
    assert names.to_catalog(names.to_wire(b)) == b


def test_unknown_wire_names_pass_unchanged() -> None:
    assert ToolNames(["git.diff"]).to_catalog("made_up") == "made_up"


def test_the_map_depends_only_on_the_names() -> None:
    first = ToolNames(["git.diff", "agent.ask", "docs.search"])
    second = ToolNames(["docs.search", "agent.ask", "git.diff"])
    assert first.renamed == second.renamed


def test_random_name_sets_map_injectively_onto_valid_names() -> None:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "._- /:@"
    for _ in range(300):
        names = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 90)))
            for _ in range(rng.randint(1, 12))
        }
        mapping = ToolNames(names)
        wires = [mapping.to_wire(n) for n in names]
        assert len(set(wires)) == len(names)
        assert all(is_valid(w) for w in wires)
        assert all(mapping.to_catalog(mapping.to_wire(n)) == n for n in names)


def test_a_tool_result_goes_upstream_under_its_calls_wire_name() -> None:
    """The history keeps ``git.diff`` on the call and on its result; both leave as one
    valid name, so the result's ``name`` matches its call's for providers that check."""
    request = pb.CompleteRequest(
        messages=[
            pb.ChatMessage(role="user", content="what changed?"),
            pb.ChatMessage(
                role="assistant",
                tool_calls=[pb.LlmToolCall(id="c1", name="git.diff", arguments_json="{}")],
            ),
            pb.ChatMessage(role="tool", content="", name="git.diff", tool_call_id="c1"),
        ]
    )
    user, assistant, result = request_from_proto(request, request_names(request)).messages
    assert assistant["tool_calls"][0]["function"]["name"] == "git_diff"
    assert result["name"] == "git_diff" and result["tool_call_id"] == "c1"
    assert "name" not in user
