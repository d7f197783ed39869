"""Serve an ASGI app inside the current event loop on a free port (tests, llmproxy's
built-in model). The process's signal handlers stay with whoever owns the process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn

from services.common.socket_writes import CoalescedHttpProtocol, CoalescedWebSocketProtocol

STARTUP_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 5.0


class _InProcessServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_free_port(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A bound socket; binding first gives the port before the server starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


# Per-message deflate costs CPU on both ends for every frame, and an IDE's frames are
# small JSON events (most one token) on a local or low-latency link: off.
UVICORN_OPTIONS: dict[str, Any] = {
    "ws_per_message_deflate": False,
    "http": CoalescedHttpProtocol,
    "ws": CoalescedWebSocketProtocol,
}
"""Every uvicorn server of the mesh: HTTP parsed by httptools (C) rather than h11, which
profiled as most of the gateway's own time per SSE request (docs/decisions.md); what a
connection sends in one loop turn written together (socket_writes.py)."""


@contextlib.asynccontextmanager
async def running_asgi(
    app: Any,
    *,
    sock: socket.socket | None = None,
    lifespan: Literal["auto", "on", "off"] = "off",
    name: str = "asgi",
    tls: tuple[str, str] | None = None,
) -> AsyncIterator[int]:
    """Serve ``app`` for the duration of the block; yields the port. ``tls`` is a
    (certificate, key) pair of PEM files: HTTPS and WSS."""
    sock = sock or bind_free_port()
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        lifespan=lifespan,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=1,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
        **UVICORN_OPTIONS,
    )
    server = _InProcessServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"{name}:{port}")
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # surfaces the startup error
                    raise RuntimeError(f"{name} exited during startup")
                await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_TIMEOUT_S)
        except TimeoutError:
            server.force_exit = True
            await task
        finally:
            sock.close()
