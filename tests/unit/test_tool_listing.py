"""ListTools' answer is built in chunks, letting the loop run between them."""

from __future__ import annotations

import asyncio
from typing import Any

from services.toolsearch.listing import CHUNK, build


def row(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": 2,
        "description": f"{name} does things.",
        "parameters_json": '{"type": "object"}',
        "executor": "ide",
        "tags": ["a", "b"],
        "active": True,
        "type": "domain",
        "category": "files",
        "long_description": "",
        "risk": "high",
        "deprecated": False,
        "timeout_seconds": 30,
        "remote_endpoint": "",
    }


async def test_a_large_listing_is_whole_and_lets_other_work_run_while_built() -> None:
    rows = [row(f"tool_{i:04}") for i in range(2 * CHUNK + 1)]
    built = False
    seen: list[bool] = []

    async def other() -> None:
        seen.append(built)

    task = asyncio.create_task(other())
    response = await build(rows)
    built = True
    await task
    assert seen == [False]  # it ran while the answer was being built
    assert [t.name for t in response.tools] == [r["name"] for r in rows]
    last = response.tools[-1]
    assert (last.version, last.parameters_json, list(last.tags)) == (
        2,
        '{"type": "object"}',
        ["a", "b"],
    )
    assert (last.risk, last.timeout_seconds, last.category) == ("high", 30, "files")
