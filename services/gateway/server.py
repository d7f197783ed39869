"""Runs the gateway under uvicorn (``python -m services.gateway``)."""

from __future__ import annotations

import uvicorn

from clients.python import MeshClient
from services.common import tracing
from services.common.asgi import UVICORN_OPTIONS
from services.common.heap import settle_built_service
from services.common.logs import configure_logging
from services.common.settings import Settings
from services.gateway.app import create_app
from services.gateway.auth import check_bind


async def serve(settings: Settings) -> None:
    configure_logging("gateway", settings.log_level)
    check_bind(settings)
    tracing.configure("gateway", settings)
    app = create_app(settings, MeshClient.from_settings(settings))
    config = uvicorn.Config(
        app,
        host=settings.gateway_host,
        port=settings.gateway_port,
        log_config=None,
        ws_ping_interval=20,
        timeout_graceful_shutdown=10,
        ssl_certfile=settings.gateway_tls_cert,
        ssl_keyfile=settings.gateway_tls_key,
        **UVICORN_OPTIONS,
    )
    settle_built_service()
    # uvicorn handles SIGTERM/SIGINT: stop accepting, finish requests, run lifespan exit.
    try:
        await uvicorn.Server(config).serve()
    finally:
        tracing.shutdown()
