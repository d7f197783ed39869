"""``/health``: each mesh service's gRPC health, and since when a service is down.

A watcher polls every service's ``grpc.health.v1`` once a second for as long as the app
runs, so ``since`` is the first poll that saw the service down, not the first ``/health``
request that happened to look.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from clients.python import MeshClient
from services.common.settings import Settings
from services.gateway.admin_sources import sources_health

POLL_SECONDS = 1.0
SERVING = "SERVING"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class HealthWatch:
    """The mesh's health as last polled, and when each service was first seen down."""

    def __init__(
        self,
        check: Callable[[], Awaitable[dict[str, str]]],
        *,
        interval: float = POLL_SECONDS,
        clock: Callable[[], str] = now_iso,
    ) -> None:
        self._check = check
        self._interval = interval
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.down_since: dict[str, str] = {}
        """Service name -> ISO time of the first poll (or request) that saw it not SERVING."""

    def observe(self, services: Mapping[str, str]) -> None:
        """Record one look at the mesh: a service back to SERVING is no longer down."""
        now = self._clock()
        for name, status in services.items():
            if status == SERVING:
                self.down_since.pop(name, None)
            else:
                self.down_since.setdefault(name, now)

    async def poll_once(self) -> dict[str, str]:
        services = await self._check()
        self.observe(services)
        return services

    async def _run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="gateway-health-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def build_health_router(
    client: MeshClient, settings: Settings, watch: HealthWatch, version: str
) -> APIRouter:
    router = APIRouter(tags=["ops"])

    @router.get("/health")
    async def health() -> JSONResponse:
        """Each mesh service's gRPC health; 200 only when all are SERVING. ``down`` names
        each service that is not, with ``since`` (first seen so by the gateway's watcher)."""
        services = await watch.poll_once()
        healthy = all(status == SERVING for status in services.values())
        body: dict[str, Any] = {
            "status": "healthy" if healthy else "unhealthy",
            "version": version,
            "multi_agent_mode": settings.multi_agent_mode,
            "services": services,
            "down": {
                name: {"status": services[name], "since": since}
                for name, since in watch.down_since.items()
            },
            # MCP servers as this gateway's orchestrator sees them (never makes it unhealthy).
            "tool_sources": await sources_health(client),
        }
        return JSONResponse(body, status_code=200 if healthy else 503)

    return router
