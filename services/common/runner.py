"""The shared ``serve()`` of every gRPC service process.

Logging, the database (DATABASE_URL or the embedded server), migrations, the
metrics endpoint, SIGTERM handling and cleanup are the same everywhere; a
service supplies only ``build(settings, pool, address)``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from services.common import tracing
from services.common.db import Pool, create_pool
from services.common.embedded_pg import resolve_database
from services.common.heap import settle_built_service
from services.common.logs import configure_logging
from services.common.metrics import serve_metrics
from services.common.migrations import apply_migrations
from services.common.server import MeshServer, run_until_signal
from services.common.settings import Settings

log = logging.getLogger(__name__)

Build = Callable[[Settings, Pool, str], Awaitable[tuple[MeshServer, int]]]


async def migrate(pool: Pool, migrations: Sequence[tuple[str, Path]]) -> None:
    """Apply each (schema, folder) in order."""
    for schema, folder in migrations:
        await apply_migrations(pool, schema, folder)


async def run_service(
    name: str,
    settings: Settings,
    address: str,
    build: Build,
    migrations: Sequence[tuple[str, Path]],
) -> None:
    """Serve ``name`` on ``address`` until SIGTERM/SIGINT."""
    configure_logging(name, settings.log_level)
    tracing.configure(name, settings)
    dsn, embedded = await resolve_database(settings)
    pool = await create_pool(dsn)
    try:
        await migrate(pool, migrations)
        server, port = await build(settings, pool, address)
        settle_built_service()
        metrics_port = serve_metrics(port, settings.metrics_port_offset, settings.metrics_host)
        log.info("serving", extra={"fields": {"port": port, "metrics_port": metrics_port}})
        await run_until_signal(server)
    finally:
        await pool.close()
        if embedded is not None:
            embedded.stop()
        tracing.shutdown()
        log.info("stopped")


def main(serve: Callable[[Settings], Coroutine[Any, Any, None]]) -> None:
    """Entry point of ``python -m services.<name>``: env -> Settings -> serve(), on uvloop
    (its event loop costs less per callback than asyncio's own: every token passes a few)."""
    import os
    import sys

    import uvloop

    from services.common.errors import SettingsError

    try:
        settings = Settings.from_env(os.environ)
        settings.require_internal_key()
    except SettingsError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    uvloop.run(serve(settings))
