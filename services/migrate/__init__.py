"""Apply every service's migrations and exit (``python -m services.migrate``).

Each service also migrates its own schema at start under one advisory lock; on
Kubernetes a Job runs this first so that replicas start against a ready schema and
a failed migration stops the rollout before any pod serves.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from services.common.db import Pool, create_pool
from services.common.errors import SettingsError
from services.common.migrations import migration_files
from services.common.runner import migrate
from services.common.settings import Settings

log = logging.getLogger(__name__)


def all_migrations() -> list[tuple[str, Path]]:
    """(schema, folder) of every service, in the order the mesh starts them."""
    from services.hitl.server import MIGRATIONS as HITL
    from services.llmproxy.server import MIGRATIONS as LLMPROXY
    from services.orchestrator.server import MIGRATIONS as ORCHESTRATOR
    from services.toolsearch.server import MIGRATIONS as TOOLSEARCH

    return [*LLMPROXY, *TOOLSEARCH, *HITL, *ORCHESTRATOR]


async def pending(pool: Pool) -> list[str]:
    """Migration files not yet applied (``schema/file``), read without taking the lock."""
    missing: list[str] = []
    for schema, folder in all_migrations():
        table = await pool.fetchval("select to_regclass($1)", f"{schema}.schema_migrations")
        done = (
            {r["version"] for r in await pool.fetch(f"select version from {table}")}
            if table is not None
            else set()
        )
        missing += [
            f"{schema}/{path.name}"
            for version, path in migration_files(folder)
            if version not in done
        ]
    return missing


async def run(settings: Settings, *, wait: bool = False, poll: float = 2.0) -> None:
    """Migrate the database of DATABASE_URL (required: a Job has no embedded server);
    ``wait``: apply nothing, return once the migration Job has applied everything (an
    init container, so that no replica starts before the Job finished)."""
    if not settings.database_url:
        raise SettingsError("DATABASE_URL must be set to run the migrations")
    pool = await create_pool(settings.database_url)
    try:
        if not wait:
            await migrate(pool, all_migrations())
            log.info("migrations applied")
            return
        while missing := await pending(pool):
            log.info("waiting for the migration job", extra={"fields": {"pending": missing}})
            await asyncio.sleep(poll)
    finally:
        await pool.close()
