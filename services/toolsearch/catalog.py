"""The tool catalog: the built-in tools and queries over the versioned table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from services.common.db import Pool
from services.common.errors import DatabaseError, InvalidInput
from services.common.sql import load_queries

SQL_DIR = Path(__file__).parent / "sql"
QUERIES = load_queries(SQL_DIR / "queries.sql")
BUILTIN_FILE = Path(__file__).parent / "builtin_tools.json"
DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


@dataclass(frozen=True)
class Tool:
    """One version of a tool."""

    name: str
    version: int
    description: str
    parameters: dict[str, Any]
    executor: str
    tags: tuple[str, ...]
    active: bool = True


def builtin_tools() -> list[dict[str, Any]]:
    """The tools of the spec, as shipped."""
    tools: list[dict[str, Any]] = json.loads(BUILTIN_FILE.read_text())
    return tools


def _tool(row: asyncpg.Record) -> Tool:
    return Tool(
        name=row["name"],
        version=row["version"],
        description=row["description"],
        parameters=row["parameters"],
        executor=row["executor"],
        tags=tuple(row["tags"]),
        active=row["active"],
    )


class Catalog:
    """Reads and writes toolsearch.tools."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def install_builtins(self) -> None:
        """Insert the built-in tools, adding a version only where a definition changed."""
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                for tool in builtin_tools():
                    await conn.execute(
                        QUERIES["upsert_builtin"],
                        tool["name"],
                        tool["description"],
                        tool["parameters"],
                        tool["executor"],
                        tool.get("tags", []),
                    )
        except DB_ERRORS as error:
            raise DatabaseError(f"cannot install tools: {error}", code="DB_WRITE_ERROR") from error

    async def list_tools(self, names: list[str]) -> list[Tool]:
        try:
            rows = await self.pool.fetch(QUERIES["list_tools"], names)
        except DB_ERRORS as error:
            raise DatabaseError(f"cannot list tools: {error}", code="DB_READ_ERROR") from error
        return [_tool(r) for r in rows]

    async def search(self, query: str, top_k: int, allowed: list[str]) -> list[tuple[Tool, float]]:
        """Lexical (full-text) search, best first."""
        if not query.strip():
            raise InvalidInput("query must not be empty")
        if not 0 < top_k <= 100:
            raise InvalidInput("top_k must be between 1 and 100")
        try:
            rows = await self.pool.fetch(QUERIES["search_tools"], query, top_k, allowed)
        except DB_ERRORS as error:
            raise DatabaseError(f"cannot search tools: {error}", code="DB_READ_ERROR") from error
        return [(_tool(r), float(r["score"])) for r in rows]
