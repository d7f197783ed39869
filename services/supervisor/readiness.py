"""Readiness: probes ("does this child answer yet?") and waiting until all answer.

A probe never raises for the ordinary "not up yet" cases (connection refused,
timeout, NOT_SERVING, non-200); it answers False so the caller simply polls again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import grpc
import httpx
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
"""An async readiness check: True once the child serves."""

# One attempt must stay short: the supervisor polls, and a hung attempt would
# delay noticing that the child came up.
ATTEMPT_TIMEOUT = 2.0

_WILDCARDS = {"0.0.0.0", "::", "[::]", ""}


def dial_host(host: str) -> str:
    """The host to connect to for a listen host: wildcards mean this machine."""
    return "127.0.0.1" if host in _WILDCARDS else host


def dial_address(address: str) -> str:
    """``host:port`` to connect to for a listen address (first one when comma-separated)."""
    first = address.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return f"{dial_host(host)}:{port}"


def grpc_serving(
    address: str,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    credentials: grpc.ChannelCredentials | None = None,
) -> Probe:
    """Probe: ``grpc.health.v1.Health/Check`` for the whole server ("") says SERVING
    (over TLS with ``credentials``)."""
    target = dial_address(address)

    def channel() -> aio.Channel:
        if credentials is None:
            return aio.insecure_channel(target)
        return aio.secure_channel(target, credentials)

    async def probe() -> bool:
        # A fresh channel per attempt: a channel created before the server
        # listened would otherwise sit in reconnect backoff and lag behind.
        async with channel() as channel_:
            stub = health_pb2_grpc.HealthStub(channel_)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            except grpc.RpcError as exc:
                log.debug("grpc not ready", extra={"fields": {"target": target, "err": str(exc)}})
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    return probe


def http_ok(url: str, *, timeout: float = ATTEMPT_TIMEOUT) -> Probe:
    """Probe: ``GET url`` answers 200."""

    async def probe() -> bool:
        # trust_env=False: a corporate HTTP(S)_PROXY must not intercept loopback probes.
        # An https URL is our own child on loopback, whose certificate names the public
        # host: the probe asks only "does it answer", so it does not check the name.
        async with httpx.AsyncClient(
            timeout=timeout, trust_env=False, verify=not url.startswith("https://")
        ) as client:
            try:
                response = await client.get(url)
            except httpx.HTTPError as exc:
                log.debug("http not ready", extra={"fields": {"url": url, "err": repr(exc)}})
                return False
        return response.status_code == 200

    return probe


async def _attempt(name: str, probe: Probe | None, limit: float) -> bool:
    if probe is None:
        return True
    try:
        return await asyncio.wait_for(probe(), limit)
    except Exception as exc:
        # Any probe (tests inject their own) that errors or hangs means "not ready
        # yet"; the next poll tries again.
        log.debug("probe failed", extra={"fields": {"child": name, "error": repr(exc)}})
        return False


async def wait_until_ready(
    probes: Mapping[str, Probe | None], *, warn_after: float, poll: float = 0.25
) -> None:
    """Poll every probe until all say True (None counts as ready).

    Past ``warn_after`` seconds it logs which children are not ready and keeps polling, more
    slowly: a slow child may still come up, and the caller decides what failure is.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + warn_after
    pending = dict(probes)
    warned = False
    while True:
        names = list(pending)
        results = await asyncio.gather(
            *(_attempt(name, pending[name], poll + ATTEMPT_TIMEOUT * 2) for name in names)
        )
        for name, ok in zip(names, results, strict=True):
            if ok:
                del pending[name]
        if not pending:
            break
        if not warned and loop.time() >= deadline:
            warned = True
            log.warning(
                "children not ready yet; still waiting",
                extra={"fields": {"not_ready": sorted(pending), "timeout_s": warn_after}},
            )
        await asyncio.sleep(max(poll, 1.0) if warned else poll)
    log.info("all children ready", extra={"fields": {"children": list(probes)}})
