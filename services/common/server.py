"""One factory for every gRPC service: interceptors, health, reflection, limits.

Health starts NOT_SERVING and a readiness loop flips it to SERVING only while
every readiness probe (database, dependencies) answers. With GRPC_TLS_* the port speaks
TLS; GRPC_HEALTH_PORT adds a plaintext port that serves health alone (kubelet's gRPC
probes speak no TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from services.common import tracing
from services.common.interceptors import AuthInterceptor, ObservingInterceptor
from services.common.settings import Settings
from services.common.tls import MeshTls

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
LIVENESS = "liveness"
"""Health service name that is SERVING while the process runs, whatever its dependencies
(a liveness probe must not restart a pod because the database is away)."""

# grpc's defaults (1000 pending, hard limit 3000) cancel bursts of new streams
# when hundreds of IDEs connect at once.
SERVER_OPTIONS = (
    ("grpc.max_concurrent_streams", 10_000),
    ("grpc.server.max_pending_requests", 20_000),
    ("grpc.server.max_pending_requests_hard_limit", 40_000),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", 32 * 1024 * 1024),
    ("grpc.max_send_message_length", 32 * 1024 * 1024),
)


@dataclass(frozen=True)
class ServiceDeps:
    """What a service plugs into the factory."""

    name: str
    """Short name for logs and metrics (orchestrator, hitl, ...)."""
    full_names: Sequence[str]
    """Fully-qualified gRPC service names (for health and reflection)."""
    register: Callable[[aio.Server], None]
    """Adds the servicers to the server."""
    probes: Sequence[Probe] = field(default_factory=tuple)
    """Readiness probes; all must answer True for SERVING."""
    probe_interval: float = 1.0


class MeshServer:
    """A started-on-demand gRPC server with health that follows readiness."""

    def __init__(
        self,
        server: aio.Server,
        health: HealthServicer,
        deps: ServiceDeps,
        health_server: aio.Server | None = None,
    ) -> None:
        self.server = server
        self.health = health
        self.deps = deps
        self.health_server = health_server
        """The plaintext health-only server (GRPC_HEALTH_PORT), when there is one."""
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.serving = False
        self.on_stop: list[Callable[[], Awaitable[None]]] = []
        """Closers run after the server stopped (clients, pools owned by the service)."""
        self.on_stopping: list[Callable[[], None]] = []
        """Told as the grace period starts (a long-lived call that is idle may end)."""

    async def start(self) -> None:
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        await self._probe_once()
        self._loop_task = asyncio.create_task(self._probe_loop(), name="readiness")

    async def _probe_once(self) -> None:
        ok = not self._stopping
        for probe in self.deps.probes:
            if not ok:
                break
            try:
                ok = await asyncio.wait_for(probe(), timeout=max(self.deps.probe_interval, 1.0))
            except Exception:  # a probe that raises means "not ready"
                ok = False
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ok
            else (health_pb2.HealthCheckResponse.NOT_SERVING)
        )
        if ok != self.serving:
            log.info("health changed", extra={"fields": {"serving": ok}})
        self.serving = ok
        for name in ("", *self.deps.full_names):
            await self.health.set(name, status)

    async def _probe_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.deps.probe_interval)
            await self._probe_once()

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new work (health NOT_SERVING), let calls finish, then close."""
        if self._stopping:
            return
        self._stopping = True
        if self._loop_task:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await self.health.enter_graceful_shutdown()
        for tell in self.on_stopping:
            tell()
        await self.server.stop(grace)
        if self.health_server is not None:
            await self.health_server.stop(0)
        for close in reversed(self.on_stop):
            await close()

    async def wait_for_termination(self) -> None:
        await self.server.wait_for_termination()


def create_server(
    settings: Settings, deps: ServiceDeps, address: str = "127.0.0.1:0"
) -> tuple[MeshServer, int]:
    """Build the server for ``deps`` bound to ``address``; port 0 picks a free port."""
    server = aio.server(
        interceptors=(
            *tracing.server_interceptors(),
            AuthInterceptor(settings.require_internal_key()),
            ObservingInterceptor(deps.name),
        ),
        options=SERVER_OPTIONS,
    )
    deps.register(server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (
            *deps.full_names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    tls = MeshTls.from_settings(settings)
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, tls.server_credentials())
    if port == 0:
        raise OSError(f"could not bind {address}")
    health_server = None
    if settings.grpc_health_port:
        health_server = health_only_server(health, address, settings.grpc_health_port)
    return MeshServer(server, health, deps, health_server), port


def health_only_server(health: HealthServicer, address: str, port: int) -> aio.Server:
    """A plaintext server on ``port`` (same host as ``address``) serving only health."""
    server = aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    host = address.rpartition(":")[0]
    if server.add_insecure_port(f"{host}:{port}") == 0:
        raise OSError(f"could not bind the health port {host}:{port}")
    return server


async def run_until_signal(server: MeshServer, grace: float = 5.0) -> None:
    """Serve until SIGTERM/SIGINT, then stop gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    log.info("stopping", extra={"fields": {"grace": grace}})
    await server.stop(grace)
