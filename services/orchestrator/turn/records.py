"""Sources and artifacts: what an agent read and what it produced, from completed calls.

Read tools leave sources (the file, or the search's query); write tools leave artifacts
once the IDE confirmed them (a completed call), never for proposals, rejections or errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from services.common.db import Pool, db_errors
from services.orchestrator.state.store import QUERIES
from services.orchestrator.turn.ledger import LedgerCall

SOURCE_TOOLS = {
    "read_file": "file",
    "search_in_code": "search",
    "search_in_project": "search",
    "list_files": "directory",
    "git.diff": "diff",
}
ARTIFACT_TOOLS = {"write_file": "file", "apply_patch": "patch", "create_directory": "directory"}
_PATCHED = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)


def _source(tool: str, arguments: dict[str, Any]) -> str | None:
    if tool in ("search_in_code", "search_in_project"):
        return str(arguments.get("query") or "") or None
    return str(arguments.get("path") or ".")


def _artifacts(tool: str, arguments: dict[str, Any]) -> list[tuple[str, int]]:
    if tool == "apply_patch":
        patch = str(arguments.get("patch", ""))
        return [(p, len(patch)) for p in _PATCHED.findall(patch) if p != "/dev/null"]
    path = arguments.get("path")
    return [(str(path), len(str(arguments.get("content", ""))))] if path else []


@dataclass(frozen=True)
class CallRecords:
    """What a finished call leaves: sources (kind, locator), artifacts (kind, path, bytes)."""

    sources: list[tuple[str, str]] = field(default_factory=list)
    artifacts: list[tuple[str, str, int]] = field(default_factory=list)


def call_records(call: LedgerCall, state: str) -> CallRecords:
    """What a finished call read or wrote (only when it completed); written with its
    outcome (``Ledger.complete``)."""
    if state != "completed" or not isinstance(call.arguments, dict):
        return CallRecords()
    found = CallRecords()
    if call.tool_name in SOURCE_TOOLS:
        locator = _source(call.tool_name, call.arguments)
        if locator:
            found.sources.append((SOURCE_TOOLS[call.tool_name], locator))
    if call.tool_name in ARTIFACT_TOOLS:
        kind = ARTIFACT_TOOLS[call.tool_name]
        found.artifacts.extend(
            (kind, path, size) for path, size in _artifacts(call.tool_name, call.arguments)
        )
    return found


class Records:
    """Reads a session's sources and artifacts."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def of_session(self, session_id: str) -> dict[str, list[dict[str, Any]]]:
        async with db_errors("read records", "DB_READ_ERROR"):
            sources = await self.pool.fetch(QUERIES["session_sources"], session_id)
            artifacts = await self.pool.fetch(QUERIES["session_artifacts"], session_id)
            executions = await self.pool.fetch(QUERIES["session_executions"], session_id)
        return {
            "sources": [dict(r) for r in sources],
            "artifacts": [dict(r) for r in artifacts],
            "executions": [dict(r) for r in executions],
        }
