"""The four gRPC services, the scripted model and the gateway, in-process on free ports."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from clients.python import MeshClient
from services.common.asgi import running_asgi
from services.common.db import Pool, create_pool
from services.common.server import MeshServer
from services.common.settings import Settings
from services.gateway.app import create_app
from services.hitl import server as hitl
from services.llmproxy import server as llmproxy
from services.orchestrator import server as orchestrator
from services.scripted_model.scenarios import ScriptedModelState
from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model
from services.toolsearch import server as toolsearch

INTERNAL_KEY = "test-internal-key"
Build = Callable[[Settings, Pool, str], Awaitable[tuple[MeshServer, int]]]


@dataclass
class Mesh:
    """A running mesh: its settings (with the real ports), clients and the model."""

    settings: Settings
    model: ScriptedModelHandle
    pool: Pool
    client: MeshClient
    servers: dict[str, MeshServer] = field(default_factory=dict)
    gateway_url: str = ""

    @property
    def scripted(self) -> ScriptedModelState:
        return self.model.state

    def ws_url(self, session_id: str, query: str = "") -> str:
        base = self.gateway_url.replace("http", "ws", 1)
        return f"{base}/ws/{session_id}" + (f"?{query}" if query else "")


def base_settings(model_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "internal_api_key": INTERNAL_KEY,
        "openai_base_url": model_url,
        "llm_timeout": 10.0,
        "llm_max_retries": 2,
        "llm_turn_retries": 1,  # one in-turn retry keeps failure tests quick
        "metrics_port_offset": 0,
        "sse_heartbeat": 0.2,
        **overrides,
    }
    return Settings(**values)


async def wait_serving(client: MeshClient, seconds: float = 15.0) -> None:
    async with asyncio.timeout(seconds):
        while True:
            statuses = await client.health()
            if all(s == "SERVING" for s in statuses.values()):
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_mesh(
    database_url: str, *, gateway: bool = True, **overrides: Any
) -> AsyncIterator[Mesh]:
    """Start everything against ``database_url``; stop it all afterwards."""
    async with running_scripted_model() as model:
        pool = await create_pool(database_url)
        settings = base_settings(model.base_url, **overrides)
        servers: dict[str, MeshServer] = {}
        builds: list[tuple[str, Build, str]] = [
            ("llmproxy", llmproxy.build, "llmproxy_addr"),
            ("toolsearch", toolsearch.build, "toolsearch_addr"),
            ("hitl", hitl.build, "hitl_addr"),
            ("orchestrator", orchestrator.build, "orchestrator_addr"),
        ]
        client: MeshClient | None = None
        try:
            for name, build, field_name in builds:
                server, port = await build(settings, pool, "127.0.0.1:0")
                await server.start()
                servers[name] = server
                settings = dataclasses.replace(settings, **{field_name: f"127.0.0.1:{port}"})  # type: ignore[arg-type]
            client = MeshClient.from_settings(settings)
            await wait_serving(client)
            mesh = Mesh(settings, model, pool, client, servers)
            if not gateway:
                yield mesh
                return
            gateway_client = MeshClient.from_settings(settings)
            cert, key = settings.gateway_tls_cert, settings.gateway_tls_key
            tls = (str(cert), str(key)) if cert and key else None
            async with running_asgi(
                create_app(settings, gateway_client), lifespan="on", name="gateway", tls=tls
            ) as port:
                mesh.gateway_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
                yield mesh
        finally:
            if client is not None:
                await client.close()
            for server in reversed(servers.values()):
                await server.stop(0.5)
            await pool.close()
