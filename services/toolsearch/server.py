"""Builds the toolsearch server; ``serve()`` runs it as a process."""

from __future__ import annotations

from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.common import db
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.toolsearch.catalog import SQL_DIR, Catalog
from services.toolsearch.servicer import SERVICE_NAME, ToolSearchServicer

MIGRATIONS = (("toolsearch", SQL_DIR / "migrations"),)


async def build(settings: Settings, pool: db.Pool, address: str) -> tuple[MeshServer, int]:
    """The toolsearch server over ``pool``, with the built-in tools installed."""
    catalog = Catalog(pool)
    await catalog.install_builtins()
    servicer = ToolSearchServicer(catalog)

    async def database_answers() -> bool:
        return await db.ping(pool)

    deps = ServiceDeps(
        name="toolsearch",
        full_names=(SERVICE_NAME,),
        register=lambda server: pb_grpc.add_ToolSearchServicer_to_server(servicer, server),
        probes=(database_answers,),
    )
    return create_server(settings, deps, address)


async def serve(settings: Settings) -> None:
    await run_service("toolsearch", settings, settings.toolsearch_addr, build, MIGRATIONS)
