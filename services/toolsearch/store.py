"""SQL over ``toolsearch.tools``: versions, the catalog version, the rows search holds.

asyncpg errors become DatabaseError here; nothing above this module sees asyncpg.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncpg
import numpy as np
import numpy.typing as npt

from services.common.db import Pool
from services.common.errors import DatabaseError
from services.common.sql import load_queries
from services.toolsearch.catalog import Tool, ToolDraft
from services.toolsearch.version_watch import VersionWatch

SQL_DIR = Path(__file__).parent / "sql"
QUERIES = load_queries(SQL_DIR / "queries.sql")
DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
Key = tuple[str, int, str | None]
"""(name, version, embedding model): a row search holds changes only with a new key."""
Vector = npt.NDArray[np.float32]


def _tool(row: asyncpg.Record) -> Tool:
    return Tool(
        name=row["name"],
        version=row["version"],
        description=row["description"],
        parameters=row["parameters"],
        executor=row["executor"],
        tags=tuple(row["tags"]),
        active=row["active"],
        type=row["type"],
        category=row["category"],
        risk=row["risk"],
        long_description=row["long_description"],
        deprecated=row["deprecated"],
        timeout_seconds=row["timeout_seconds"],
        remote_endpoint=row["remote_endpoint"],
    )


@dataclass(frozen=True)
class Stored:
    """A current version and the model its embedding came from (None: not embedded)."""

    tool: Tool
    embedding_model: str | None


@dataclass(frozen=True)
class Indexed:
    """A served tool as search holds it: the version and its embedding (None: none yet)."""

    tool: Tool
    vector: Vector | None


def _vector(raw: bytes | None) -> Vector | None:
    # pgvector's binary form: int16 dimensions, int16 unused, big-endian float4s.
    return None if raw is None else np.frombuffer(raw, dtype=">f4", offset=4).astype(np.float32)


async def _current(conn: asyncpg.Connection, names: Sequence[str]) -> dict[str, Stored]:
    rows = await conn.fetch(QUERIES["current_tools"], list(names))
    return {r["name"]: Stored(_tool(r), r["embedding_model"]) for r in rows}


class CatalogWriter:
    """Writes inside one transaction that holds the catalog's advisory lock."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.moved = False
        """This transaction moved the catalog's version."""

    async def current(self, names: Sequence[str]) -> dict[str, Stored]:
        """Current versions of ``names``, as of this (locked) transaction."""
        return await _current(self.conn, names)

    async def add_versions(
        self, versions: Sequence[tuple[ToolDraft, int, Sequence[float]]], model: str
    ) -> None:
        """Insert (draft, version, vector) rows as the new current versions."""
        await self.conn.execute(QUERIES["retire_current"], [d.name for d, _, _ in versions])
        await self.conn.executemany(
            QUERIES["insert_version"],
            [
                (
                    d.name,
                    version,
                    d.description,
                    d.parameters,
                    d.executor,
                    list(d.tags),
                    d.active,
                    d.type,
                    d.category,
                    d.long_description,
                    d.risk,
                    d.deprecated,
                    list(vector),
                    model,
                    d.timeout_seconds,
                    d.remote_endpoint,
                )
                for d, version, vector in versions
            ],
        )

    async def set_embeddings(
        self, rows: Sequence[tuple[str, int, Sequence[float]]], model: str
    ) -> None:
        await self.conn.executemany(
            QUERIES["set_embedding"],
            [(name, version, list(v), model) for name, version, v in rows],
        )

    async def bump(self) -> int:
        version: int = await self.conn.fetchval(QUERIES["bump_catalog_version"])
        self.moved = True
        return version

    async def version(self) -> int:
        version: int = await self.conn.fetchval(QUERIES["catalog_version"])
        return version


class ToolStore:
    """Reads and writes the catalog tables."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.watch = VersionWatch(pool)

    @contextlib.asynccontextmanager
    async def writer(self) -> AsyncIterator[CatalogWriter]:
        """A transaction holding the catalog lock; asyncpg errors become DatabaseError."""
        try:
            async with self.pool.acquire() as conn:
                async with conn.transaction():
                    await conn.execute(QUERIES["lock_catalog"])
                    writer = CatalogWriter(conn)
                    yield writer
                if writer.moved:  # committed: this process's next search sees it
                    self.watch.changed()
        except DB_ERRORS as error:
            raise DatabaseError(f"cannot write tools: {error}", code="DB_WRITE_ERROR") from error

    async def catalog_version(self) -> int:
        """The version searches serve: read once per change heard (version_watch.py)."""
        known = self.watch.known()
        if known is not None:
            return known
        token = self.watch.reading()
        try:
            version: int = await self.pool.fetchval(QUERIES["catalog_version"])
        except DB_ERRORS as error:
            raise DatabaseError(
                f"cannot read the catalog: {error}", code="DB_READ_ERROR"
            ) from error
        self.watch.read(version, token)
        return version

    async def snapshot(self, held: Container[Key]) -> tuple[int, list[Key], dict[Key, Indexed]]:
        """The catalog version, the keys of its active tools in name order, and the rows
        (with embeddings) of the keys not ``held`` already; read consistently."""
        try:
            async with (
                self.pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                version: int = await conn.fetchval(QUERIES["catalog_version"])
                keys: list[Key] = [
                    (r["name"], r["version"], r["embedding_model"])
                    for r in await conn.fetch(QUERIES["active_keys"])
                ]
                wanted = [key[0] for key in keys if key not in held]
                rows = await conn.fetch(QUERIES["active_rows"], wanted) if wanted else []
        except DB_ERRORS as error:
            raise DatabaseError(
                f"cannot read the catalog: {error}", code="DB_READ_ERROR"
            ) from error
        fresh = {
            (r["name"], r["version"], r["embedding_model"]): Indexed(
                _tool(r), _vector(r["embedding"])
            )
            for r in rows
        }
        return version, keys, fresh

    async def current(self, names: Sequence[str]) -> dict[str, Stored]:
        """Current versions of ``names``, without the lock (a first look before embedding)."""
        try:
            async with self.pool.acquire() as conn:
                return await _current(conn, names)
        except DB_ERRORS as error:
            raise DatabaseError(
                f"cannot read the catalog: {error}", code="DB_READ_ERROR"
            ) from error

    async def listed(self, names: Sequence[str]) -> list[Mapping[str, Any]]:
        """The current active tools of ``names`` (none: all), by name, as rows of the
        ToolSpec message's fields (``parameters_json`` the stored JSON's text)."""
        try:
            rows = await self.pool.fetch(QUERIES["list_tools"], list(names))
        except DB_ERRORS as error:
            raise DatabaseError(f"cannot list tools: {error}", code="DB_READ_ERROR") from error
        return cast("list[Mapping[str, Any]]", rows)

    async def stale_embeddings(self, model: str) -> list[Tool]:
        """Current versions not embedded by ``model``."""
        try:
            rows = await self.pool.fetch(QUERIES["stale_embeddings"], model)
        except DB_ERRORS as error:
            raise DatabaseError(
                f"cannot read the catalog: {error}", code="DB_READ_ERROR"
            ) from error
        return [_tool(r) for r in rows]
