"""Template definitions: canonical form, limits, references; and their directory ranking."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.errors import InvalidInput
from services.orchestrator.agents.template_rules import canonical, check_references
from services.orchestrator.agents.templates import AgentTemplate, builtin_definitions
from services.orchestrator.errors import BadFileRule, InvalidTemplate, UnknownAgent, UnknownTool
from services.orchestrator.peers.agent_directory import lexically

MINIMAL = {
    "name": "helper",
    "prompt_pack": {"system_prompt": "Help."},
    "tool_policy": {"allowed": ["*"]},
}
TOOLS = {"read_file", "write_file", "attempt_completion"}


def test_defaults_make_equal_definitions_equal() -> None:
    explicit = {
        **MINIMAL,
        "base_class": "ToolCallingAgent",
        "execution_policy": {"max_iterations": 25},
        "tool_policy": {"allowed": ["*"], "mode": "static", "max_tools": 0},
        "hitl": {"always_approve": []},
    }
    assert canonical(MINIMAL) == canonical(explicit)
    stored = canonical(MINIMAL)
    assert stored["display_name"] == "Helper" and stored["llm_config"]["temperature"] is None
    assert stored["hitl"] == {} and stored["multiagent_meta"] == {"capabilities": "", "tags": []}


def test_the_context_budget_is_stored_only_when_given() -> None:
    assert "context_window" not in canonical(MINIMAL)["llm_config"]
    default = AgentTemplate.from_definition(canonical(MINIMAL))
    assert (default.context_window, default.max_output_tokens) == (128_000, 4_096)
    assert not default.send_reasoning
    given = {
        **MINIMAL,
        "llm_config": {"context_window": 32_000, "max_output_tokens": 2_000},
        "prompt_pack": {"system_prompt": "Help.", "compaction_prompt": "Summarise."},
    }
    template = AgentTemplate.from_definition(canonical(given))
    assert (template.context_window, template.max_output_tokens) == (32_000, 2_000)
    assert template.prompt_pack["compaction_prompt"] == "Summarise."


@pytest.mark.parametrize(
    ("llm", "limit"),
    [
        ({}, None),
        ({"max_output_tokens": 2_000}, 2_000),
        ({"max_tokens": 500}, 500),
        ({"max_tokens": 500, "max_output_tokens": 2_000}, 500),
    ],
)
def test_each_call_asks_for_at_most_the_answers_reserve(
    llm: dict[str, int], limit: int | None
) -> None:
    """max_tokens wins; else the reserve kept for the answer is what the call asks for."""
    template = AgentTemplate.from_definition(canonical({**MINIMAL, "llm_config": llm}))
    assert template.output_limit == limit


def test_builtins_keep_their_prompts_and_tools() -> None:
    by_name = {d["name"]: AgentTemplate.from_definition(d) for d in builtin_definitions()}
    assert set(by_name) == {
        "orchestrator", "coder", "architect", "debug", "ask", "universal", "conductor",
    }  # fmt: skip
    assert by_name["coder"].allowed_tools == ("*",) and by_name["coder"].handoff == (
        "architect",
        "debug",
    )
    assert by_name["architect"].file_restrictions == (r"\.md$",)
    assert by_name["orchestrator"].temperature == 0.3 and by_name["orchestrator"].max_tokens == 200
    assert by_name["ask"].max_iterations == 10
    assert by_name["debug"].system_prompt.startswith("You are the Debug agent")
    assert by_name["universal"].tool_policy.required == (
        "attempt_completion",
        "ask_followup_question",
    )


@pytest.mark.parametrize(
    ("change", "error", "fragment"),
    [
        ({"name": "X"}, InvalidTemplate, "bad template name"),
        ({"name": None}, InvalidTemplate, "'name' is required"),
        ({"prompt_pack": {"system_prompt": ""}}, InvalidTemplate, "system_prompt"),
        ({"prompt_pack": "Help."}, InvalidTemplate, "must be a JSON object"),
        ({"execution_policy": {"max_tool_calls": 10**6}}, InvalidTemplate, "between 1 and 5000"),
        ({"execution_policy": {"max_iterations": True}}, InvalidTemplate, "an integer"),
        ({"execution_policy": {"max_turn_tokens": -1}}, InvalidTemplate, "between 0 and"),
        ({"llm_config": {"max_tokens": 1.5}}, InvalidTemplate, "an integer"),
        ({"tool_policy": {"allowed": []}}, InvalidTemplate, "at least one tool"),
        ({"tool_policy": {"allowed": ["*"], "colour": 1}}, InvalidTemplate, "unknown field"),
        ({"file_restrictions": ["["]}, BadFileRule, "not a regex"),
        ({"llm_config": {"context_window": 100}}, InvalidTemplate, "between 1024"),
        (
            {"llm_config": {"context_window": 8_000, "max_output_tokens": 4_000}},
            InvalidTemplate,
            "at least half",
        ),
        ({"llm_config": {"send_reasoning": "yes"}}, InvalidTemplate, "true or false"),
    ],
)
def test_malformed_definitions(
    change: dict[str, Any], error: type[InvalidInput], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        canonical({**MINIMAL, **change})


@pytest.mark.parametrize(
    ("policy", "handoff", "error"),
    [
        ({"allowed": ["read_file", "fly"]}, [], UnknownTool),
        ({"allowed": ["read_file"], "required": ["write_file"]}, [], UnknownTool),
        (
            {"allowed": ["*"], "required": ["read_file", "write_file"], "max_tools": 1},
            [],
            InvalidTemplate,
        ),
        ({"allowed": ["agent.ghost"]}, [], UnknownAgent),
        ({"allowed": ["*"]}, ["ghost"], UnknownAgent),
        ({"allowed": ["*"]}, ["helper"], InvalidTemplate),
    ],
)
def test_references_must_resolve(
    policy: dict[str, Any], handoff: list[str], error: type[InvalidInput]
) -> None:
    definition = canonical({**MINIMAL, "tool_policy": policy, "handoff": handoff})
    with pytest.raises(error):
        check_references(definition, TOOLS, {"coder", "helper"})


def test_good_references_pass() -> None:
    policy = {"allowed": ["read_file", "agent.coder", "agent.*"], "required": ["read_file"]}
    definition = canonical({**MINIMAL, "tool_policy": policy, "handoff": ["coder"]})
    check_references(definition, TOOLS, {"coder"})


def search_agents(query: str, templates: list[AgentTemplate]) -> list[str]:
    """The directory's lexical ranking of the templates' capability texts, best first."""
    entries = [(t.name, t.capability_text()) for t in templates]
    return [hit.name for hit in lexically(query, entries, len(entries))]


def test_agent_search_prefers_the_fitting_specialist() -> None:
    templates = [AgentTemplate.from_definition(d) for d in builtin_definitions()]
    assert search_agents("why does this test fail with a stack trace", templates)[0] == "debug"
    assert search_agents("explain what this function does", templates)[0] == "ask"
    assert search_agents("refactor and implement the feature", templates)[0] == "coder"
    assert search_agents("", templates) == [] and search_agents("xylophone", templates) == []


def test_the_first_flat_shape_is_still_understood() -> None:
    flat = {
        "name": "lead",
        "system_prompt": "Delegate.",
        "allowed_tools": ["read_file", "agent.ask"],
        "llm": {"temperature": 0.2},
        "execution": {"max_iterations": 5},
    }
    sectioned = {
        "name": "lead",
        "prompt_pack": {"system_prompt": "Delegate."},
        "tool_policy": {"allowed": ["read_file", "agent.ask"]},
        "llm_config": {"temperature": 0.2},
        "execution_policy": {"max_iterations": 5},
    }
    assert canonical(flat) == canonical(sectioned)
    template = AgentTemplate.from_definition(flat)
    assert template.system_prompt == "Delegate." and template.allowed_tools == (
        "read_file",
        "agent.ask",
    )
    assert template.temperature == 0.2 and template.max_iterations == 5
    with pytest.raises(InvalidTemplate, match="disagree"):
        canonical({**sectioned, "system_prompt": "Something else."})


def test_the_approval_policy_carries_a_read_only_allow_list() -> None:
    entries = ["@default", "terraform plan", "make docs"]
    stored = canonical({**MINIMAL, "approval_policy": {"read_only": entries}})
    assert stored["hitl"] == {"read_only": entries}
    assert canonical({**MINIMAL, "hitl": {"read_only": entries}}) == stored
    with pytest.raises(InvalidTemplate, match=r"hitl\.read_only"):
        canonical({**MINIMAL, "hitl": {"read_only": ["ls", ""]}})
    with pytest.raises(InvalidTemplate, match="unknown field"):
        canonical({**MINIMAL, "approval_policy": {"read_onyl": ["ls"]}})
