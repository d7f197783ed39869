"""Real Postgres for tests: the embedded server, a migrated template, a clone per test."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from services.common.db import create_pool
from services.common.runner import migrate
from services.migrate import all_migrations

TEMPLATE = "codelab_template"
ALL_MIGRATIONS: Sequence[tuple[str, Path]] = tuple(all_migrations())


def with_database(dsn: str, name: str) -> str:
    """The same server DSN pointing at database ``name``."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def build_template(server_dsn: str) -> None:
    """(Re)create the template database with every service's migrations applied."""
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"drop database if exists {TEMPLATE} with (force)")
        await admin.execute(f"create database {TEMPLATE}")
    finally:
        await admin.close()
    pool = await create_pool(with_database(server_dsn, TEMPLATE))
    try:
        await migrate(pool, ALL_MIGRATIONS)
    finally:
        await pool.close()


async def clone_database(server_dsn: str) -> str:
    """A fresh database cloned from the template; returns its DSN."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"create database {name} template {TEMPLATE}")
    finally:
        await admin.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"drop database if exists {name} with (force)")
    finally:
        await admin.close()


async def add_template(dsn: str, definition: Mapping[str, object]) -> None:
    """Install one more agent template (version 1) before a mesh starts on ``dsn``."""
    import json

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "insert into orchestrator.agent_templates (name, version, definition) "
            "values ($1, 1, $2::jsonb)",
            definition["name"],
            json.dumps(definition),
        )
    finally:
        await conn.close()
