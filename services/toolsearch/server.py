"""Builds the toolsearch server; ``serve()`` runs it as a process."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import cast

from codelab.v1 import llmproxy_pb2_grpc
from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.common import db
from services.common.channels import mesh_channel
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.toolsearch.catalog import builtin_drafts
from services.toolsearch.config import ToolSearchConfig
from services.toolsearch.embedder import Embedder, LlmProxyEmbedder, MemoEmbedder, local_embedder
from services.toolsearch.indexing import Indexer
from services.toolsearch.retrieval import SearchEngine
from services.toolsearch.servicer import SERVICE_NAME, ToolSearchServicer
from services.toolsearch.store import SQL_DIR, ToolStore

MIGRATIONS = (("toolsearch", SQL_DIR / "migrations"),)


async def build(
    settings: Settings, pool: db.Pool, address: str, config: ToolSearchConfig | None = None
) -> tuple[MeshServer, int]:
    """The toolsearch server over ``pool``, with the built-in tools installed and embedded.

    ``config`` defaults to the process environment (this is the composition root).
    """
    config = config or ToolSearchConfig.from_env(os.environ)
    closers: list[Callable[[], Awaitable[None]]] = []
    embedder: Embedder
    if config.embeddings == "llmproxy":
        channel = mesh_channel(settings, settings.llmproxy_addr)
        stub = cast("llmproxy_pb2_grpc.LlmProxyAsyncStub", llmproxy_pb2_grpc.LlmProxyStub(channel))
        embedder = MemoEmbedder(LlmProxyEmbedder(stub, settings.embedding_model))
        closers.append(channel.close)
    else:
        embedder = local_embedder()
    store = ToolStore(pool)
    indexer = Indexer(store, embedder)
    await indexer.upsert(builtin_drafts())
    await indexer.refresh_embeddings()
    engine = SearchEngine(store, embedder, config)
    servicer = ToolSearchServicer(store, engine, indexer, embedder, config.lexical_weight)

    async def database_answers() -> bool:
        return await db.ping(pool)

    deps = ServiceDeps(
        name="toolsearch",
        full_names=(SERVICE_NAME,),
        register=lambda server: pb_grpc.add_ToolSearchServicer_to_server(servicer, server),
        probes=(database_answers,),
    )
    server, port = create_server(settings, deps, address)
    server.on_stop.extend([*closers, engine.close, store.watch.close])
    return server, port


async def serve(settings: Settings) -> None:
    await run_service("toolsearch", settings, settings.toolsearch_addr, build, MIGRATIONS)
