"""Searches read the catalog's version once per change heard, not before every search:
this process's own import and another replica's are heard when they commit, a read that
raced a change is not kept, a version may go back (a restored database), and with the
listener gone every search reads again until it is back."""

from __future__ import annotations

import asyncio

from services.common.db import Pool
from services.toolsearch.catalog import make_draft
from services.toolsearch.embedder import local_embedder
from services.toolsearch.indexing import Indexer
from services.toolsearch.store import ToolStore


async def following(store: ToolStore) -> int:
    """The version once the listener is up and a read was kept (the first call starts it)."""
    for _ in range(200):
        await store.catalog_version()
        known = store.watch.known()
        if known is not None:
            return known
        await asyncio.sleep(0.02)
    raise AssertionError("the listener never started")


async def eventually(store: ToolStore, version: int) -> None:
    for _ in range(200):
        if await store.catalog_version() == version:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never saw version {version}: {await store.catalog_version()}")


async def test_an_own_import_is_read_at_once_and_nothing_is_read_between_changes(
    pool: Pool,
) -> None:
    store = ToolStore(pool)
    try:
        start = await following(store)
        # Moved behind the listener's back (no notification): not read, so not seen.
        await pool.execute("update toolsearch.catalog_state set version = version + 100")
        assert await store.catalog_version() == start
        indexer = Indexer(store, local_embedder())
        report = await indexer.upsert([make_draft({"name": "own_tool", "description": "Own."})])
        assert report.catalog_version == start + 101
        assert await store.catalog_version() == start + 101  # at once, not on a notification
    finally:
        await store.watch.close()


async def test_another_replicas_import_is_seen_when_it_commits(pool: Pool) -> None:
    store, other = ToolStore(pool), ToolStore(pool)
    try:
        start = await following(store)
        async with other.writer() as writer:
            bumped = await writer.bump()
            await asyncio.sleep(0.1)
            assert await store.catalog_version() == start  # not committed yet
        assert bumped == start + 1
        await eventually(store, bumped)
    finally:
        await store.watch.close()


async def test_a_read_that_raced_a_change_is_not_kept(pool: Pool) -> None:
    store = ToolStore(pool)
    try:
        start = await following(store)
        token = store.watch.reading()
        store.watch.changed()  # heard while the read was on its way
        store.watch.read(start, token)
        assert store.watch.known() is None
        assert await store.catalog_version() == start  # read again, and kept this time
        assert store.watch.known() == start
    finally:
        await store.watch.close()


async def test_a_version_that_goes_back_is_followed(pool: Pool) -> None:
    store = ToolStore(pool)
    try:
        start = await following(store)
        for version in (start + 10, start):  # ahead, then back (a restored database)
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("update toolsearch.catalog_state set version = $1", version)
                await conn.execute("notify toolsearch_catalog")
            await eventually(store, version)
    finally:
        await store.watch.close()


async def test_without_the_listener_the_version_is_read_and_listening_resumes(
    pool: Pool,
) -> None:
    store = ToolStore(pool)
    try:
        start = await following(store)
        listener = store.watch._conn
        assert listener is not None
        await pool.execute("select pg_terminate_backend($1)", listener.get_server_pid())
        for _ in range(200):
            if listener.is_closed():
                break
            await asyncio.sleep(0.02)
        # Moved without a notification while nobody listens: read, so seen.
        await pool.execute("update toolsearch.catalog_state set version = version + 5")
        assert await store.catalog_version() == start + 5
        assert await following(store) == start + 5  # listening again
        assert store.watch._conn is not listener
        async with ToolStore(pool).writer() as writer:  # and hears the next change
            bumped = await writer.bump()
        await eventually(store, bumped)
    finally:
        await store.watch.close()
