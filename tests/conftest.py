"""Shared fixtures: the embedded Postgres (real, never mocked) and a database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.common.db import Pool, create_pool
from services.common.embedded_pg import EmbeddedPostgres, start_embedded
from tests.support.databases import build_template, clone_database, drop_database

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The server DSN: TEST_DATABASE_URL when set, else an embedded server under .data/."""
    external = os.environ.get("TEST_DATABASE_URL")
    if external:
        yield external
        return
    server: EmbeddedPostgres = start_embedded(ROOT / ".data" / "test-postgres")
    yield server.dsn
    server.stop()


@pytest.fixture(scope="session")
async def pg_template(pg_server: str) -> str:
    await build_template(pg_server)
    return pg_server


@pytest.fixture
async def database_url(pg_template: str) -> AsyncIterator[str]:
    """A migrated database of its own for this test."""
    dsn = await clone_database(pg_template)
    yield dsn
    await drop_database(pg_template, dsn)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await create_pool(database_url)
    yield pool
    await pool.close()
