"""JSON bodies of the admin routes -> protos, with 400s that name the offending field.

Shape checks only (types, known keys, ranges the gateway owns); what a tool or a
template *means* is validated by the service that stores it (toolsearch, orchestrator),
whose INVALID_ARGUMENT comes back as 400 with its spec code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from codelab.v1 import admin_pb2, toolsearch_pb2
from services.gateway.errors import ProtocolError

TOOL_FIELDS = frozenset(
    {"name", "description", "long_description", "parameters", "executor", "type", "category",
     "tags", "risk", "deprecated", "remote_endpoint"}
)  # fmt: skip
FILTER_FIELDS = frozenset(
    {"types", "categories", "allowed", "deny", "max_risk", "include_deprecated", "required",
     "max_tools"}
)  # fmt: skip
SEARCH_MODES = {
    "hybrid": toolsearch_pb2.SEARCH_MODE_HYBRID,
    "lexical": toolsearch_pb2.SEARCH_MODE_LEXICAL,
    "dense": toolsearch_pb2.SEARCH_MODE_DENSE,
}
MAX_TOP_K = 50
MAX_IMPORT = 10_000


def _fail(code: str, message: str) -> ProtocolError:
    return ProtocolError(code, message)


def _text(body: Mapping[str, Any], key: str, code: str, *, required: bool = False) -> str:
    value = body.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(code, f"'{key}' must be a {'non-empty ' if required else ''}string")
    return value


def _strings(body: Mapping[str, Any], key: str, code: str) -> list[str]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(code, f"'{key}' must be a list of strings")
    return value


def _flag(body: Mapping[str, Any], key: str, code: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise _fail(code, f"'{key}' must be true or false")
    return value


def _count(body: Mapping[str, Any], key: str, low: int, high: int, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail("MISSING_REQUIRED_FIELD", f"'{key}' must be an integer from {low} to {high}")
    return value


def query_flag(raw: str | None, name: str) -> bool:
    """``?name=true|false|1|0`` (absent: false)."""
    if raw is None:
        return False
    lowered = raw.strip().lower()
    if lowered not in ("true", "false", "1", "0", ""):
        raise _fail("MISSING_REQUIRED_FIELD", f"{name} must be true or false, got {raw!r}")
    return lowered in ("true", "1")


def query_version(raw: str | None) -> int | None:
    """``?version=N`` as a positive int, or None."""
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise _fail("MISSING_REQUIRED_FIELD", f"version must be a positive integer, got {raw!r}")
    return int(raw)


def tool_input(raw: Any) -> toolsearch_pb2.ToolInput:
    """One tool of an import (seed 003 section 4.2)."""
    code = "TOOL_VALIDATION_ERROR"
    if not isinstance(raw, dict):
        raise _fail(code, "each tool must be a JSON object")
    unknown = sorted(set(raw) - TOOL_FIELDS)
    if unknown:
        raise _fail(code, f"unknown tool field(s) {unknown}; known: {sorted(TOOL_FIELDS)}")
    parameters = raw.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _fail(code, "'parameters' must be a JSON schema object")
    return toolsearch_pb2.ToolInput(
        name=_text(raw, "name", code, required=True),
        description=_text(raw, "description", code, required=True),
        long_description=_text(raw, "long_description", code),
        parameters_json=json.dumps(parameters) if parameters is not None else "",
        executor=_text(raw, "executor", code),
        type=_text(raw, "type", code),
        category=_text(raw, "category", code),
        tags=_strings(raw, "tags", code),
        risk=_text(raw, "risk", code),
        deprecated=_flag(raw, "deprecated", code),
        remote_endpoint=_text(raw, "remote_endpoint", code),
    )


def tool_import(body: dict[str, Any]) -> toolsearch_pb2.UpsertToolsRequest:
    """``{"tools": [...]}`` (bulk import) or one tool object."""
    items = body.get("tools", [body])
    if not isinstance(items, list) or not items:
        raise _fail("TOOL_VALIDATION_ERROR", "'tools' must be a non-empty list of tools")
    if len(items) > MAX_IMPORT:
        raise _fail("TOOL_VALIDATION_ERROR", f"at most {MAX_IMPORT} tools per import")
    return toolsearch_pb2.UpsertToolsRequest(tools=[tool_input(t) for t in items])


def deactivation(tool: toolsearch_pb2.ToolSpec) -> toolsearch_pb2.ToolInput:
    """The tool's current definition as a new, inactive version."""
    return toolsearch_pb2.ToolInput(
        name=tool.name,
        description=tool.description,
        long_description=tool.long_description,
        parameters_json=tool.parameters_json,
        executor=tool.executor,
        type=tool.type,
        category=tool.category,
        tags=list(tool.tags),
        risk=tool.risk,
        deprecated=tool.deprecated,
        remote_endpoint=tool.remote_endpoint,
        inactive=True,
    )


def tool_search(body: dict[str, Any]) -> toolsearch_pb2.SearchToolsRequest:
    """``{query, top_k?, filters?: {types, categories, allowed, deny, max_risk,
    include_deprecated, required, max_tools}, mode?: hybrid | lexical | dense}``."""
    code = "MISSING_REQUIRED_FIELD"
    filters = body.get("filters") or {}
    if not isinstance(filters, dict):
        raise _fail(code, "'filters' must be a JSON object")
    unknown = sorted(set(filters) - FILTER_FIELDS)
    if unknown:
        raise _fail(code, f"unknown filter(s) {unknown}; known: {sorted(FILTER_FIELDS)}")
    mode = _text(body, "mode", code) or "hybrid"
    if mode not in SEARCH_MODES:
        raise _fail(code, f"'mode' must be one of {sorted(SEARCH_MODES)}")
    return toolsearch_pb2.SearchToolsRequest(
        query=_text(body, "query", code, required=True),
        top_k=_count(body, "top_k", 1, MAX_TOP_K, 5),
        types=_strings(filters, "types", code),
        categories=_strings(filters, "categories", code),
        allowed=_strings(filters, "allowed", code),
        deny=_strings(filters, "deny", code),
        max_risk=_text(filters, "max_risk", code),
        include_deprecated=_flag(filters, "include_deprecated", code),
        required=_strings(filters, "required", code),
        max_tools=_count(filters, "max_tools", 0, 256, 0),
        mode=SEARCH_MODES[mode],
    )


def agent_search(body: dict[str, Any]) -> admin_pb2.SearchAgentsRequest:
    """``{query, top_k?}``."""
    return admin_pb2.SearchAgentsRequest(
        query=_text(body, "query", "MISSING_REQUIRED_FIELD", required=True),
        top_k=_count(body, "top_k", 1, MAX_TOP_K, 5),
    )


def template_definition(body: dict[str, Any], path_name: str | None = None) -> str:
    """The definition to store, as JSON; PUT takes the name from the path."""
    if path_name is not None:
        named = body.get("name", path_name)
        if named != path_name:
            raise _fail(
                "MISSING_REQUIRED_FIELD",
                f"body name {named!r} differs from the path's {path_name!r}",
            )
        body = {**body, "name": path_name}
    return json.dumps(body, ensure_ascii=False)
