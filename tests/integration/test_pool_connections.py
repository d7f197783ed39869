"""A new pooled connection is ready for every statement the services run: asyncpg knows
the codecs of arrays of oid and text only, and looked up any other array type with its
introspection query on the first statement naming it (a round trip and 2-10 ms of
Postgres each, on that statement's way). The pool's connections learn them all as they
open, in one query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from services.common.db import create_pool
from services.common.sql import load_queries

ROOT = Path(__file__).resolve().parents[2]


def service_statements() -> list[tuple[str, str]]:
    """(file: name, text) of every named statement in the services' SQL files."""
    return [
        (f"{path.relative_to(ROOT)}: {name}", text)
        for path in sorted((ROOT / "services").rglob("*.sql"))
        if "migrations" not in path.parts
        for name, text in load_queries(path).items()
    ]


async def test_a_new_connection_prepares_every_service_statement_without_introspection(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = service_statements()
    assert len(statements) > 100  # the files were found
    looked_up: list[tuple[str, list[int]]] = []
    current = [""]
    introspect = asyncpg.Connection._introspect_types

    async def recorded(self: asyncpg.Connection, oids: Any, *rest: Any) -> Any:
        looked_up.append((current[0], sorted(oids)))
        return await introspect(self, oids, *rest)

    monkeypatch.setattr(asyncpg.Connection, "_introspect_types", recorded)
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            opened = len(looked_up)
            for name, text in statements:
                current[0] = name
                await conn.prepare(text)
    finally:
        await pool.close()
    assert opened == 1  # the connection's own lookup, as it opened
    assert looked_up[opened:] == []
