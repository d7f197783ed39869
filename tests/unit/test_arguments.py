"""Tool-call argument validation: parsing, schema errors, the hint for the model, caching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from services.orchestrator.turn import arguments as arguments_module
from services.orchestrator.turn.arguments import (
    MAX_PROBLEM_CHARS,
    ArgumentCheck,
    validate_arguments,
)

_SPECS = json.loads(
    (Path(__file__).parents[2] / "services/toolsearch/builtin_tools.json").read_text("utf-8")
)
SCHEMAS: dict[str, dict[str, Any]] = {spec["name"]: spec["parameters"] for spec in _SPECS}
WRITE_FILE = SCHEMAS["write_file"]


def test_valid_arguments_are_parsed() -> None:
    check = validate_arguments("write_file", '{"path": "a.py", "content": "x = 1"}', WRITE_FILE)
    assert check == ArgumentCheck(True, {"path": "a.py", "content": "x = 1"}, None)


@pytest.mark.parametrize("raw", ["", "   ", "\n\t"])
def test_empty_raw_means_no_arguments(raw: str) -> None:
    assert validate_arguments("list_files", raw, SCHEMAS["list_files"]) == ArgumentCheck(
        True, {}, None
    )


def test_empty_raw_is_still_validated() -> None:
    check = validate_arguments("write_file", "", WRITE_FILE)
    assert not check.ok
    assert check.problem is not None
    assert "'content' is a required property" in check.problem
    assert "'path' is a required property" in check.problem


def test_every_error_is_reported_in_path_order() -> None:
    check = validate_arguments("write_file", '{"path": 3, "mode": "w"}', WRITE_FILE)
    assert check.ok is False
    assert check.arguments == {}
    assert check.problem is not None
    assert check.problem.startswith("Invalid arguments for write_file: ")
    head = check.problem.split(". Expected schema: ")[0]
    complaints = head.removeprefix("Invalid arguments for write_file: ").split("; ")
    # Root-level errors (no path) sort before the one located at 'path'.
    assert complaints[-1] == "'path' must be string"
    assert "'content' is a required property" in complaints
    assert any("'mode' was unexpected" in c for c in complaints)
    assert len(complaints) == 3


def test_problem_repeats_the_compact_schema() -> None:
    check = validate_arguments("echo", '{"text": 5}', SCHEMAS["echo"])
    assert check.problem is not None
    schema_text = check.problem.split("Expected schema: ", 1)[1]
    assert json.loads(schema_text) == SCHEMAS["echo"]
    assert ", " not in schema_text and ": " not in schema_text


@pytest.mark.parametrize("raw", ['{"path": "a"', "{'path': 'a'}", '{"x": NaN}', "[" * 100_000])
def test_invalid_json_is_a_problem_not_an_exception(raw: str) -> None:
    check = validate_arguments("read_file", raw, SCHEMAS["read_file"])
    assert not check.ok
    assert check.arguments == {}
    assert check.problem is not None
    assert "arguments are not valid JSON: " in check.problem


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ('["a.py"]', "an array"),
        ('"a.py"', "a string"),
        ("3.5", "a number"),
        ("true", "a boolean"),
        ("null", "null"),
    ],
)
def test_non_object_json_is_refused(raw: str, kind: str) -> None:
    check = validate_arguments("read_file", raw, SCHEMAS["read_file"])
    assert not check.ok
    assert check.problem is not None
    assert f"arguments must be a JSON object, got {kind}. Expected schema: " in check.problem


def test_booleans_are_not_integers() -> None:
    check = validate_arguments(
        "read_file", '{"path": "a", "start_line": true}', SCHEMAS["read_file"]
    )
    assert check.problem is not None
    assert "'start_line' must be integer" in check.problem


def test_nested_errors_name_their_location() -> None:
    raw = json.dumps({"goal": "g", "subtasks": [{"description": "d", "agent": "wizard"}]})
    check = validate_arguments("create_plan", raw, SCHEMAS["create_plan"])
    assert check.problem is not None
    assert "'subtasks/0/agent': 'wizard' is not one of" in check.problem


def test_problem_length_is_capped() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)}}
    raw = json.dumps({f"p{i}": i for i in range(300)})
    check = validate_arguments("wide", raw, schema)
    assert check.problem is not None
    assert len(check.problem) <= MAX_PROBLEM_CHARS
    assert check.problem.endswith("...")
    assert "and 292 more" in check.problem


def test_one_huge_value_does_not_flood_the_problem() -> None:
    schema = {"type": "object", "properties": {"mode": {"enum": ["a", "b"]}}}
    check = validate_arguments("t", json.dumps({"mode": "x" * 5000}), schema)
    assert check.problem is not None
    assert len(check.problem) < 400


def test_validators_are_cached_per_tool_and_schema() -> None:
    arguments_module._validator.cache_clear()
    for _ in range(3):
        validate_arguments("echo", '{"text": "hi"}', SCHEMAS["echo"])
    validate_arguments("echo", '{"text": "hi"}', dict(reversed(list(SCHEMAS["echo"].items()))))
    info = arguments_module._validator.cache_info()
    assert (info.misses, info.hits) == (1, 3)
    validate_arguments("calculator", '{"expression": "1"}', SCHEMAS["calculator"])
    assert arguments_module._validator.cache_info().misses == 2


def test_a_malformed_schema_is_a_registry_bug() -> None:
    with pytest.raises(SchemaError):
        validate_arguments("broken", "{}", {"type": "not-a-type"})
