"""Builds the llmproxy server; ``serve()`` runs it as a process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from openai import AsyncOpenAI

from codelab.v1 import llmproxy_pb2_grpc as pb_grpc
from services.common import db
from services.common.runner import run_service
from services.common.server import MeshServer, ServiceDeps, create_server
from services.common.settings import Settings
from services.llmproxy.accounting import AccountedUpstream
from services.llmproxy.pacing import TextBudget
from services.llmproxy.servicer import SERVICE_NAME, LlmProxyServicer
from services.llmproxy.store import SQL_DIR, UsageStore
from services.llmproxy.upstream import Upstream

MIGRATIONS = (("llmproxy", SQL_DIR / "migrations"),)


async def build(
    settings: Settings, pool: db.Pool, address: str, *, base_url: str | None = None
) -> tuple[MeshServer, int]:
    """The llmproxy server over ``pool`` talking to ``base_url`` (default OPENAI_BASE_URL)."""
    url = base_url or settings.openai_base_url
    if url is None:
        raise ValueError("llmproxy needs an upstream base URL")
    client = AsyncOpenAI(
        base_url=url, api_key=settings.openai_api_key, max_retries=0, timeout=settings.llm_timeout
    )
    upstream = Upstream(
        client,
        default_model=settings.llm_model,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
    )
    store = UsageStore(pool)
    servicer = LlmProxyServicer(
        AccountedUpstream(upstream, store),
        store,
        settings.embedding_model,
        TextBudget(settings.llm_stream_pieces_per_s),
    )

    async def database_answers() -> bool:
        return await db.ping(pool)

    deps = ServiceDeps(
        name="llmproxy",
        full_names=(SERVICE_NAME,),
        register=lambda server: pb_grpc.add_LlmProxyServicer_to_server(servicer, server),
        probes=(database_answers, upstream.reachable),
    )
    server, port = create_server(settings, deps, address)
    server.on_stop.extend([upstream.close, store.settled])
    server.on_stopping.append(servicer.stopping.set)
    return server, port


@contextlib.asynccontextmanager
async def upstream_url(settings: Settings) -> AsyncIterator[str]:
    """OPENAI_BASE_URL, or a built-in scripted model started in this process."""
    if settings.openai_base_url:
        yield settings.openai_base_url
        return
    from services.scripted_model.testing import running_scripted_model

    async with running_scripted_model(token_delay_ms=settings.scripted_token_delay_ms) as model:
        yield model.base_url


async def serve(settings: Settings) -> None:
    async with upstream_url(settings) as url:

        async def build_with_url(
            s: Settings, pool: db.Pool, address: str
        ) -> tuple[MeshServer, int]:
            return await build(s, pool, address, base_url=url)

        await run_service("llmproxy", settings, settings.llmproxy_addr, build_with_url, MIGRATIONS)
