"""The migration entry point of the Kubernetes Job and of the init containers that wait
for it (``python -m services.migrate [--wait]``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.common.db import create_pool
from services.common.errors import SettingsError
from services.common.settings import Settings
from services.migrate import all_migrations, pending, run
from tests.support.databases import drop_database, with_database


@pytest.fixture
async def empty_database(pg_server: str) -> AsyncIterator[str]:
    name = f"m_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f"create database {name}")
    finally:
        await admin.close()
    dsn = with_database(pg_server, name)
    yield dsn
    await drop_database(pg_server, dsn)


async def missing(dsn: str) -> list[str]:
    pool = await create_pool(dsn)
    try:
        return await pending(pool)
    finally:
        await pool.close()


async def test_the_job_applies_every_schema_and_the_waiters_then_go_on(
    empty_database: str,
) -> None:
    files = sum(len(list(folder.glob("*.sql"))) for _, folder in all_migrations())
    assert len(await missing(empty_database)) == files
    settings = Settings(database_url=empty_database)
    waiter = asyncio.create_task(run(settings, wait=True, poll=0.05))
    await asyncio.sleep(0.2)
    assert not waiter.done()  # nothing applied yet: the init container keeps waiting
    await run(settings)
    assert await missing(empty_database) == []
    async with asyncio.timeout(10):
        await waiter


async def test_an_already_migrated_database_has_nothing_pending(database_url: str) -> None:
    assert await missing(database_url) == []
    await run(Settings(database_url=database_url), wait=True)


async def test_the_job_needs_a_database_url() -> None:
    with pytest.raises(SettingsError, match="DATABASE_URL"):
        await run(Settings())
