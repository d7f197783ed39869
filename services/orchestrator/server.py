"""Builds the orchestrator server; ``serve()`` runs it as a process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import cast

import httpx
from grpc import aio

from codelab.v1 import (
    access_pb2_grpc,
    admin_pb2_grpc,
    hitl_pb2_grpc,
    llmproxy_pb2_grpc,
    sources_pb2_grpc,
    toolsearch_pb2_grpc,
)
from services.common import db, tracing
from services.common.channels import mesh_channel, replicas
from services.common.key_hashing import key_hash, shown_prefix
from services.common.probes import health_probe
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.orchestrator.agents.instances import InstancePool
from services.orchestrator.agents.template_vectors import keep_embedded
from services.orchestrator.agents.templates import AgentRegistry, install_templates
from services.orchestrator.peers.agent_directory import (
    AgentDirectory,
    directory_embedder,
    directory_searcher,
)
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.peers.mcp_sources import EXECUTOR as MCP
from services.orchestrator.peers.mcp_sources import McpSources
from services.orchestrator.peers.mesh_clients import (
    HitlClient,
    catalog_version,
    load_catalog,
    tool_searcher,
)
from services.orchestrator.peers.source_catalog import CatalogTool, SourceCatalog
from services.orchestrator.peers.source_registry import SourceRegistry
from services.orchestrator.peers.tool_source import ToolSource
from services.orchestrator.session.client_ids import ClientIds
from services.orchestrator.session.inputs import Inputs
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.session.ownership import Ownership
from services.orchestrator.session.runtime import Runtime
from services.orchestrator.session.tool_timeouts import ToolTimeouts
from services.orchestrator.state import SQL_DIR
from services.orchestrator.state.api_keys import ApiKeys
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import SessionStore
from services.orchestrator.state.tool_sources import SourceStore
from services.orchestrator.transport.access_servicer import SERVICE_NAME as ACCESS_SERVICE_NAME
from services.orchestrator.transport.access_servicer import AccessServicer
from services.orchestrator.transport.admin_servicer import SERVICE_NAME as ADMIN_SERVICE_NAME
from services.orchestrator.transport.admin_servicer import AgentAdminServicer
from services.orchestrator.transport.servicer import (
    SERVICE_NAME,
    AgentRuntimeServicer,
    add_runtime_servicer,
)
from services.orchestrator.transport.sources_servicer import SERVICE_NAME as SOURCES_SERVICE_NAME
from services.orchestrator.transport.sources_servicer import ToolSourcesServicer
from services.orchestrator.turn.executors.mcp import McpTools
from services.orchestrator.turn.executors.remote import RemoteTools
from services.orchestrator.turn.ledger import Ledger
from services.orchestrator.turn.loop import AgentLoop
from services.orchestrator.turn.toolbox import Toolbox

MIGRATIONS = (("orchestrator", SQL_DIR / "migrations"),)


async def build(settings: Settings, pool: db.Pool, address: str) -> tuple[MeshServer, int]:
    """The orchestrator over ``pool``, calling llmproxy, hitl and toolsearch."""
    channels = {
        name: mesh_channel(settings, addr)
        for name, addr in (
            ("llmproxy", settings.llmproxy_addr),
            ("hitl", settings.hitl_addr),
            ("toolsearch", settings.toolsearch_addr),
        )
    }
    limits = UserLimits(pool, settings.limits)
    llm = LlmClient(
        cast(
            "llmproxy_pb2_grpc.LlmProxyAsyncStub",
            llmproxy_pb2_grpc.LlmProxyStub(channels["llmproxy"]),
        ),
        deadline=settings.llm_timeout * (settings.llm_max_retries + 1) + 30,
        turn_retries=settings.llm_turn_retries,
        meter=limits,
        early=settings.llm_early_requests,
        # One shared call per llmproxy replica; with tracing, each call opens in its span's
        # context (a shared call would carry the context of its opening).
        shared=0 if tracing.enabled() else len(replicas(settings.llmproxy_addr)),
    )
    hitl = HitlClient(cast("hitl_pb2_grpc.HitlAsyncStub", hitl_pb2_grpc.HitlStub(channels["hitl"])))
    toolsearch = cast(
        "toolsearch_pb2_grpc.ToolSearchAsyncStub",
        toolsearch_pb2_grpc.ToolSearchStub(channels["toolsearch"]),
    )
    agents = AgentRegistry(await install_templates(pool), settings.multi_agent_mode)
    store, ledger = SessionStore(pool), Ledger(pool)
    hub = SessionHub(store)
    loop = AgentLoop(
        store,
        ledger,
        hub,
        llm,
        agents,
        Toolbox(
            functools.partial(load_catalog, toolsearch, {}),
            agents.all,
            tool_searcher(toolsearch),
            catalog_version(toolsearch),
        ),
        hitl,
        AgentDirectory(agents, directory_searcher(toolsearch)),
    )
    sources = tool_sources(settings, pool, SourceCatalog(toolsearch), loop)
    loop.register("mcp", McpTools(loop, ledger, hitl, sources))
    remote_http = httpx.AsyncClient(follow_redirects=False)
    loop.register("remote", RemoteTools(loop, ledger, hitl, loop.toolbox, remote_http))
    inputs = Inputs(loop, loop.plans)
    instances = InstancePool(
        pool,
        agents,
        max_per_template=settings.agent_instances_max,
        clients={"llm": llm, "hitl": hitl, "toolbox": loop.toolbox},
    )
    runtime = Runtime(
        store,
        hub,
        inputs,
        agents,
        hitl,
        Ownership(pool),
        instances,
        limits,
        ClientIds(pool),
        ToolTimeouts(pool, loop.toolbox.catalog, settings.tool_timeout),
        sweep_every=min(1.0, settings.hitl_timeout / 4),
        retention_days=settings.session_retention_days,
    )
    servicer = AgentRuntimeServicer(runtime, hub, store, ledger, agents, hitl)
    admin = AgentAdminServicer(pool, agents, loop.toolbox, instances, loop.directory)

    keys = ApiKeys(pool)
    await keys.seed(
        [(key_hash(k), user, shown_prefix(k)) for k, user in settings.gateway_api_keys.items()]
    )
    access = AccessServicer(limits, keys)

    def register(server: aio.Server) -> None:
        add_runtime_servicer(servicer, server)
        admin_pb2_grpc.add_AgentAdminServicer_to_server(admin, server)
        access_pb2_grpc.add_AccessServicer_to_server(access, server)
        sources_pb2_grpc.add_ToolSourcesServicer_to_server(
            ToolSourcesServicer(SourceRegistry(sources.store, sources)), server
        )

    async def database_answers() -> bool:
        return await db.ping(pool)

    deps = ServiceDeps(
        name="orchestrator",
        full_names=(SERVICE_NAME, ADMIN_SERVICE_NAME, ACCESS_SERVICE_NAME, SOURCES_SERVICE_NAME),
        register=register,
        probes=(database_answers, *(health_probe(c) for c in channels.values())),
    )
    server, port = create_server(settings, deps, address)
    await instances.start()
    await runtime.start()
    await sources.start()
    jobs = [
        asyncio.create_task(keep_embedded(pool, directory_embedder(toolsearch))),
        asyncio.create_task(loop.toolbox.follow()),
    ]

    async def stop_jobs() -> None:
        for job in jobs:
            job.cancel()
        for job in jobs:
            # Cancelled mid-query, asyncpg may answer with its own error instead.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job

    # Closers run last-registered first: the runtime's jobs stop before the pool and the
    # channels they use go away.
    for channel in channels.values():
        server.on_stop.append(channel.close)
    server.on_stop.append(llm.close)
    server.on_stop.append(instances.close)
    server.on_stop.append(hub.close)
    server.on_stop.append(runtime.close)
    server.on_stop.append(limits.settled)
    server.on_stop.append(stop_jobs)
    server.on_stop.append(sources.close)
    server.on_stop.append(remote_http.aclose)
    return server, port


def tool_sources(
    settings: Settings, pool: db.Pool, catalog: SourceCatalog, loop: AgentLoop
) -> McpSources:
    """The MCP connections of this process: each listing goes to the catalog, and this
    process's copy of the catalog is refreshed at once."""

    async def publish(source: ToolSource, tools: list[CatalogTool]) -> None:
        await catalog.sync(source.prefix, MCP, tools)
        await loop.toolbox.refresh()

    async def retire(name: str) -> int:
        retired = await catalog.retire(name + ".", MCP)
        await loop.toolbox.refresh()
        return retired

    return McpSources(SourceStore(pool), publish, retire, settings.tool_secrets)


async def serve(settings: Settings) -> None:
    await run_service(
        "orchestrator", settings, settings.orchestrator_addr.split(",")[0], build, MIGRATIONS
    )
