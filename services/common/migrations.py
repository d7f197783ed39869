"""Forward-only numbered migrations (``NNNN_name.sql``), applied at start.

All services share one advisory lock: two processes starting together never
apply the same file twice, and extensions (pgvector) are created once.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from services.common.db import Pool

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x0C0DE1AB  # any constant shared by every service
_FILE = re.compile(r"^(\d{4})_[\w-]+\.sql$")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]*$")


def migration_files(folder: Path) -> list[tuple[int, Path]]:
    """The numbered files in order; a repeated number is an error."""
    found: dict[int, Path] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise ValueError(f"{path}: migration files are named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ValueError(f"{path}: version {version} also used by {found[version].name}")
        found[version] = path
    return sorted(found.items())


async def apply_migrations(pool: Pool, schema: str, folder: Path) -> list[str]:
    """Apply the files of ``folder`` not yet recorded in ``<schema>.schema_migrations``."""
    if not _SCHEMA.match(schema):
        raise ValueError(f"bad schema name {schema!r}")
    files = migration_files(folder)
    applied_now: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("select pg_advisory_lock($1)", MIGRATION_LOCK)
        try:
            await conn.execute(f"create schema if not exists {schema}")
            await conn.execute(
                f"create table if not exists {schema}.schema_migrations ("
                " version integer primary key, name text not null,"
                " applied_at timestamptz not null default now())"
            )
            done = {
                r["version"]
                for r in await conn.fetch(f"select version from {schema}.schema_migrations")
            }
            for version, path in files:
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(f"set local search_path to {schema}, public")
                    await conn.execute(path.read_text())
                    await conn.execute(
                        f"insert into {schema}.schema_migrations (version, name) values ($1, $2)",
                        version,
                        path.name,
                    )
                applied_now.append(path.name)
                log.info(
                    "migration applied", extra={"fields": {"schema": schema, "file": path.name}}
                )
        finally:
            await conn.execute("select pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied_now
