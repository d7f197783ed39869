"""Tool sources as data: definitions, catalog names, secrets, the risk hitl weighs, and
``<source>.*`` in a template's allowed tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.hitl.policy import evaluate
from services.orchestrator.agents.template_rules import canonical, check_references
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.peers.tool_source import (
    REDACTED,
    InvalidSource,
    MissingSecret,
    cap,
    parse_source,
    resolve_secrets,
)
from services.orchestrator.turn.toolbox import Toolbox, ToolSpec

DESK = Path(__file__).resolve().parents[2] / "examples" / "tool_sources" / "desk.template.json"


def source(**fields: Any) -> dict[str, Any]:
    return {"name": "docs", "transport": "stdio", "command": "docs-server", **fields}


def test_a_definition_keeps_what_its_transport_uses_and_shows_no_literal_secret() -> None:
    env = {"TOKEN": "s3cret", "REF": "${DOCS_TOKEN}", "AUTH": "Bearer ${T}", "MIX": "k${T}x"}
    parsed = parse_source(source(env=env, url="http://ignored"))
    assert parsed.url == "" and parsed.risk == "medium" and parsed.timeout_seconds == 30
    shown = parsed.as_json()
    assert shown["env"] == {**env, "TOKEN": REDACTED, "MIX": REDACTED}
    assert "url" not in shown and parse_source(parsed.as_json(redact=False)) == parsed


def test_tools_are_admitted_by_glob_and_named_for_the_catalog() -> None:
    parsed = parse_source(source(allowed_tools=["get_*"], tool_risks={"get_page": "high"}))
    assert parsed.admits("get_page") and not parsed.admits("delete_page")
    assert parsed.risk_of("get_page") == "high" and parsed.risk_of("get_index") == "medium"
    assert parsed.catalog_name("pages/get page") == "docs.pages_get_page"


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "Docs"},
        {"transport": "websocket"},
        {"command": " "},
        {"transport": "streamable-http", "url": "file:///etc/passwd"},
        {"tool_risks": {"x": "severe"}},
        {"args": "--all"},
        {"max_output_chars": 0},
    ],
)
def test_a_bad_definition_names_its_problem(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidSource):
        parse_source(source(**fields))


def test_secrets_come_only_from_the_mapping_given() -> None:
    headers = {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Team": "core"}
    resolved = resolve_secrets(headers, {"DOCS_TOKEN": "abc"})
    assert resolved == {"Authorization": "Bearer abc", "X-Team": "core"}
    with pytest.raises(MissingSecret, match="TOOL_SECRET_DOCS_TOKEN"):
        resolve_secrets(headers, {})


def test_a_long_output_is_cut_and_says_so() -> None:
    assert cap("short", 10) == "short"
    assert cap("x" * 25, 10) == "x" * 10 + "\n[... 15 characters cut: the tool's output cap]"


@pytest.mark.parametrize(
    ("risk", "asks"), [("low", False), ("medium", True), ("high", True), ("", True)]
)
def test_hitl_weighs_a_source_tool_by_its_rating(risk: str, asks: bool) -> None:
    decision = evaluate("docs.get_page", {"id": 1}, tool_risk=risk)
    assert decision.requires_approval is asks
    if risk:
        assert decision.risk == risk and "rated by its tool source" in (decision.reason or "")


def test_a_rating_never_lowers_a_rule_of_the_policy() -> None:
    assert evaluate("write_file", {"path": "a", "content": ""}, tool_risk="low").requires_approval
    assert evaluate("execute_command", {"command": "rm -rf /"}, tool_risk="low").risk == "high"


async def test_a_source_glob_offers_every_tool_of_that_source_only() -> None:
    specs = [
        ToolSpec(n, n, {"type": "object"}, e)
        for n, e in [
            ("weather.get_forecast", "mcp"),
            ("weather.add", "mcp"),
            ("weatherman.x", "mcp"),
            ("read_file", "ide"),
            ("attempt_completion", "system"),
            ("search_in_code", "ide"),
        ]
    ]

    async def load() -> list[ToolSpec]:
        return specs

    definition = canonical(json.loads(DESK.read_text()))
    check_references(definition, {s.name for s in specs} - {"weather.add"}, lambda _: True)
    offered = await Toolbox(load).offered(AgentTemplate.from_definition(definition))
    names = [t.name for t in offered]
    assert names[:3] == ["read_file", "search_in_code", "attempt_completion"]
    assert names[3:5] == ["weather.add", "weather.get_forecast"]
    assert "weatherman.x" not in names and "tool_search" in names
