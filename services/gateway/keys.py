"""API key checks against the orchestrator's key table, with a short cache.

The gateway sends a key's SHA-256, never the key. An answer is kept for
GATEWAY_KEY_CACHE_SECONDS, so a revoked key stops working within that time (at once on
the gateway that revoked it). A key of GATEWAY_API_KEYS the table does not know yet is
seeded on first use; one the table knows as revoked stays refused.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import grpc
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from clients.python import MeshClient
from codelab.v1 import access_pb2
from services.common.key_hashing import key_hash, shown_prefix
from services.gateway.auth import Authenticator, bearer

log = logging.getLogger(__name__)
MAX_CACHED = 10_000


class MeshKeyChecker:
    """``KeyChecker`` over the Access service, cached for ``ttl`` seconds."""

    def __init__(self, client: MeshClient, env_keys: Mapping[str, str], ttl: float) -> None:
        self.client = client
        self.ttl = ttl
        self.seeds = {key_hash(k): (user, shown_prefix(k)) for k, user in env_keys.items()}
        self._cache: dict[bytes, tuple[str | None, float]] = {}

    async def user_of(self, key: str) -> str | None:
        hashed = key_hash(key)
        cached = self._cache.get(hashed)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        reply = await self.client.access.CheckKey(access_pb2.CheckKeyRequest(key_sha256=hashed))
        user = reply.user_id if reply.valid else None
        if not reply.known and hashed in self.seeds:
            await self.seed({hashed: self.seeds[hashed]})
            user = self.seeds[hashed][0]
        if self.ttl > 0:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[hashed] = (user, time.monotonic() + self.ttl)
        return user

    async def seed(self, keys: Mapping[bytes, tuple[str, str]] | None = None) -> None:
        """Store the GATEWAY_API_KEYS keys the table lacks (by hash)."""
        pending = self.seeds if keys is None else keys
        if not pending:
            return
        request = access_pb2.SeedKeysRequest(
            keys=[
                access_pb2.SeedKey(key_sha256=h, user_id=user, prefix=prefix)
                for h, (user, prefix) in pending.items()
            ]
        )
        await self.client.access.SeedKeys(request)

    async def seed_quietly(self) -> None:
        """At start: seed so /admin/keys lists the configured keys; a mesh that is not up
        yet is no error (each key is seeded on first use anyway)."""
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self.seed()

    def forget(self) -> None:
        """Drop every cached answer (after a revocation through this gateway)."""
        self._cache.clear()


class KeyCheck:
    """ASGI middleware: checks an HTTP request's bearer key before the route runs, so
    the routes' ``Authenticator.user_for`` stays synchronous. WebSockets check their
    own credentials (ws_auth.py)."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        if scope["type"] == "http" and self.auth.enabled:
            key = bearer(Headers(scope=scope))
            if key:
                await self.auth.check(key)
        await self.app(scope, receive, send)
