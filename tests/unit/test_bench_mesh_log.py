"""The bench counts the mesh's warnings and errors and keeps what the first of each said."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.mesh import FIELDS_SHOWN, BenchMesh, _drain


def line(level: str, msg: str, **fields: Any) -> bytes:
    entry = {"service": "llmproxy", "level": level, "msg": msg, "fields": fields}
    return (json.dumps(entry) + "\n").encode()


async def drained(*lines: bytes) -> BenchMesh:
    reader = asyncio.StreamReader()
    for text in lines:
        reader.feed_data(text)
    reader.feed_eof()
    mesh = BenchMesh(process=None, env={}, database_url="")  # type: ignore[arg-type]
    await _drain(reader, mesh, asyncio.Event())
    return mesh


async def test_problems_are_counted_with_the_first_lines_fields() -> None:
    mesh = await drained(
        line("info", "served", status=200),
        line("warning", "retrying upstream call", err="Server disconnected", attempt=1),
        line("warning", "retrying upstream call", err="Connection reset", attempt=1),
        line("error", "model call failed\ntraceback...", code="LLM_TIMEOUT"),
        b"not json at all\n",
    )
    retry = "llmproxy warning: retrying upstream call"
    failed = "llmproxy error: model call failed"
    assert mesh.problems == {retry: 2, failed: 1}
    assert json.loads(mesh.first_fields[retry]) == {"attempt": 1, "err": "Server disconnected"}
    assert json.loads(mesh.first_fields[failed]) == {"code": "LLM_TIMEOUT"}
    assert len(mesh.output) == 5


async def test_a_long_fields_object_is_shortened() -> None:
    mesh = await drained(line("warning", "slow", detail="x" * 1000))
    assert len(mesh.first_fields["llmproxy warning: slow"]) == FIELDS_SHOWN
