"""Builds the hitl server; ``serve()`` runs it as a process."""

from __future__ import annotations

from prometheus_client import Gauge

from codelab.v1 import hitl_pb2_grpc as pb_grpc
from services.common.db import Pool
from services.common.errors import ServiceError
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.hitl.approvals import Approvals
from services.hitl.servicer import SERVICE_NAME, HitlServicer
from services.hitl.store import SQL_DIR, ApprovalStore

MIGRATIONS = (("hitl", SQL_DIR / "migrations"),)
APPROVALS_WAITING = Gauge(
    "codelab_approvals_waiting", "Approvals waiting for a human (all sessions, from Postgres)"
)


async def build(settings: Settings, pool: Pool, address: str) -> tuple[MeshServer, int]:
    """The hitl server over ``pool``; it answers only while its database does."""
    store = ApprovalStore(pool)
    approvals = Approvals(store, default_timeout=settings.hitl_timeout)
    servicer = HitlServicer(approvals)

    async def database_answers() -> bool:
        # The readiness query doubles as the gauge's refresh (once per probe interval).
        try:
            APPROVALS_WAITING.set(await store.count_pending())
        except ServiceError:
            return False
        return True

    deps = ServiceDeps(
        name="hitl",
        full_names=(SERVICE_NAME,),
        register=lambda server: pb_grpc.add_HitlServicer_to_server(servicer, server),
        probes=(database_answers,),
    )
    return create_server(settings, deps, address)


async def serve(settings: Settings) -> None:
    await run_service("hitl", settings, settings.hitl_addr, build, MIGRATIONS)
