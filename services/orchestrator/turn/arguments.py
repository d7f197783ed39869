"""Validation of the arguments the model proposes for a tool call (pure functions).

The model writes tool arguments as a JSON string; before a call reaches the IDE (or a local
tool) the runtime parses it and checks it against the tool's JSON schema. A failure yields
a ``problem`` written *for the model*: it is sent back as the tool result so the model can
correct the call on its next turn, so it names every violation and repeats the schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

__all__ = ["MAX_PROBLEM_CHARS", "ArgumentCheck", "validate_arguments"]

# The problem goes into the model's context on every failed attempt: keep it bounded.
MAX_PROBLEM_CHARS = 1500
_MAX_ERRORS = 8
_MAX_ERROR_CHARS = 200


@dataclass(frozen=True)
class ArgumentCheck:
    """Outcome of ``validate_arguments``.

    ``arguments`` holds the parsed object when ``ok`` and is empty otherwise; ``problem``
    is ``None`` when ``ok`` and otherwise a correction hint addressed to the model.
    """

    ok: bool
    arguments: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity, which are not JSON and which no schema expects.
    raise ValueError(f"{name} is not valid JSON")


@lru_cache(maxsize=512)
def _validator(tool_name: str, schema_json: str) -> Draft202012Validator:
    """Compile once per (tool, schema): schemas are immutable for a given tool version.

    A malformed schema raises ``jsonschema.exceptions.SchemaError``: that is a bug in the
    tool registry, not something the model could fix, so it is not turned into a problem.
    """
    del tool_name  # part of the cache key only, so two tools never share an entry by accident
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _location(error: ValidationError) -> str:
    return "/".join(str(part) for part in error.absolute_path)


def _describe(error: ValidationError) -> str:
    """One violation, phrased around the argument name rather than the offending value."""
    where = _location(error)
    if error.validator == "type" and where:
        expected = error.validator_value
        kinds = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"'{where}' must be {kinds}"
    message = _clip(error.message, _MAX_ERROR_CHARS)
    return f"'{where}': {message}" if where else message


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


def _problem(tool_name: str, complaints: list[str], schema: Mapping[str, Any]) -> str:
    if len(complaints) > _MAX_ERRORS:
        extra = len(complaints) - _MAX_ERRORS
        complaints = [*complaints[:_MAX_ERRORS], f"and {extra} more"]
    text = f"Invalid arguments for {tool_name}: {'; '.join(complaints)}. "
    text += f"Expected schema: {_compact(schema)}"
    return _clip(text, MAX_PROBLEM_CHARS)


def _failure(tool_name: str, complaint: str, schema: Mapping[str, Any]) -> ArgumentCheck:
    return ArgumentCheck(ok=False, arguments={}, problem=_problem(tool_name, [complaint], schema))


def validate_arguments(tool_name: str, raw_json: str, schema: Mapping[str, Any]) -> ArgumentCheck:
    """Parse ``raw_json`` and check it against ``schema`` (JSON Schema draft 2020-12).

    Empty or whitespace-only ``raw_json`` means "no arguments" (models often send ``""``
    for parameterless tools) and is validated as ``{}``.
    """
    if raw_json.strip():
        try:
            parsed = json.loads(raw_json, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            # RecursionError: deeply nested input must become a hint, not crash the turn.
            reason = _clip(str(exc) or type(exc).__name__, _MAX_ERROR_CHARS)
            return _failure(tool_name, f"arguments are not valid JSON: {reason}", schema)
    else:
        parsed = {}
    if not isinstance(parsed, dict):
        complaint = f"arguments must be a JSON object, got {_json_kind(parsed)}"
        return _failure(tool_name, complaint, schema)

    validator = _validator(tool_name, _compact(schema))
    errors = sorted(
        validator.iter_errors(parsed),
        key=lambda e: ([str(part) for part in e.absolute_path], e.message),
    )
    if errors:
        problem = _problem(tool_name, [_describe(error) for error in errors], schema)
        return ArgumentCheck(ok=False, arguments={}, problem=problem)
    return ArgumentCheck(ok=True, arguments=parsed, problem=None)
