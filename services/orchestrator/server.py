"""Builds the orchestrator server; ``serve()`` runs it as a process."""

from __future__ import annotations

from typing import cast

from codelab.v1 import llmproxy_pb2_grpc
from codelab.v1 import runtime_pb2_grpc as pb_grpc
from services.common import db
from services.common.channels import internal_channel
from services.common.probes import health_probe
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.orchestrator.hub import SessionHub
from services.orchestrator.llm import LlmClient
from services.orchestrator.runtime import Runtime
from services.orchestrator.servicer import SERVICE_NAME, AgentRuntimeServicer
from services.orchestrator.store import SQL_DIR, SessionStore
from services.orchestrator.turn import TurnRunner

MIGRATIONS = (("orchestrator", SQL_DIR / "migrations"),)


async def build(settings: Settings, pool: db.Pool, address: str) -> tuple[MeshServer, int]:
    """The orchestrator over ``pool``, calling llmproxy at LLMPROXY_ADDR."""
    key = settings.require_internal_key()
    llm_channel = internal_channel(settings.llmproxy_addr, key)
    llm = LlmClient(
        cast("llmproxy_pb2_grpc.LlmProxyAsyncStub", llmproxy_pb2_grpc.LlmProxyStub(llm_channel)),
        deadline=settings.llm_timeout * (settings.llm_max_retries + 1) + 30,
    )
    store = SessionStore(pool)
    hub = SessionHub(store)
    runtime = Runtime(store, hub, TurnRunner(store, hub, llm))
    servicer = AgentRuntimeServicer(runtime, hub, store)

    async def database_answers() -> bool:
        return await db.ping(pool)

    deps = ServiceDeps(
        name="orchestrator",
        full_names=(SERVICE_NAME,),
        register=lambda server: pb_grpc.add_AgentRuntimeServicer_to_server(servicer, server),
        probes=(database_answers, health_probe(llm_channel)),
    )
    server, port = create_server(settings, deps, address)
    server.on_stop.append(runtime.close)
    server.on_stop.append(lambda: llm_channel.close())
    return server, port


async def serve(settings: Settings) -> None:
    await run_service(
        "orchestrator", settings, settings.orchestrator_addr.split(",")[0], build, MIGRATIONS
    )
