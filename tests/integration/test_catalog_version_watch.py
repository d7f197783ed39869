"""Searches follow the catalog's version by notification, not a read per search: this
process's own import is seen when it commits, another replica's when its notification
arrives, and with the listener gone the version is read again (and the listener comes
back)."""

from __future__ import annotations

import asyncio

from services.common.db import Pool
from services.toolsearch.catalog import make_draft
from services.toolsearch.embedder import local_embedder
from services.toolsearch.indexing import Indexer
from services.toolsearch.store import ToolStore


async def following(store: ToolStore) -> int:
    """The version once the listener is up (the first call starts it)."""
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


async def test_a_search_sees_its_own_import_at_once_and_reads_nothing(pool: Pool) -> None:
    store = ToolStore(pool)
    try:
        start = await following(store)
        # Moved behind the listener's back (no notification): not read, so not seen.
        await pool.execute("update toolsearch.catalog_state set version = version + 100")
        assert await store.catalog_version() == start
        indexer = Indexer(store, local_embedder())
        report = await indexer.upsert([make_draft({"name": "own_tool", "description": "Own."})])
        assert report.catalog_version == start + 101
        assert await store.catalog_version() == start + 101  # at once, not after a notification
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
        async with ToolStore(pool).writer() as writer:  # and hears the next one
            bumped = await writer.bump()
        await eventually(store, bumped)
    finally:
        await store.watch.close()
