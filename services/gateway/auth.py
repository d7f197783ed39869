"""IDE client authentication (API keys) and the loopback guard.

With GATEWAY_API_KEYS set every IDE-facing endpoint but /health wants
``Authorization: Bearer <key>`` (the WebSocket: see ws_auth.py) and the key's user owns
the sessions it creates. Keys live hashed in Postgres (the orchestrator's Access
service; /admin/keys creates and revokes them, the variable seeds them); the gateway
checks a key once per GATEWAY_KEY_CACHE_SECONDS (keys.py). Without keys the gateway
serves only loopback, as a single local user. ``X-Internal-Auth`` with the internal key
is also accepted (seed 000's internal endpoints).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Protocol

import grpc

from services.common.errors import SettingsError
from services.common.settings import Settings
from services.gateway.errors import Forbidden, Unauthorized

ADMIN_USER = "admin"


class KeyChecker(Protocol):
    """Maps an API key to its user (None: unknown or revoked); may raise a mesh error."""

    async def user_of(self, key: str) -> str | None: ...


# The outcome of the request's key check (key, user or None, or the mesh error), set by
# the KeyCheck middleware before the route runs: routes stay synchronous about auth.
CHECKED: ContextVar[tuple[str, str | BaseException | None] | None] = ContextVar(
    "checked_key", default=None
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse to expose an unauthenticated gateway beyond this machine."""
    if not settings.gateway_api_keys and not is_loopback(settings.gateway_host):
        raise SettingsError(
            f"GATEWAY_HOST={settings.gateway_host} is not loopback: set GATEWAY_API_KEYS first"
        )


def bearer(headers: Mapping[str, str]) -> str | None:
    header = headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


class Authenticator:
    """Maps a request's credentials to a user id ('' when auth is off)."""

    def __init__(self, enabled: bool, internal_key: str, checker: KeyChecker) -> None:
        self.enabled = enabled
        self.internal_key = internal_key
        self.checker = checker

    async def check(self, key: str) -> None:
        """Check ``key`` for the rest of this request (the middleware's and ws's step)."""
        outcome: str | BaseException | None
        try:
            outcome = await self.checker.user_of(key)
        except grpc.aio.AioRpcError as error:  # the route reports it (503 when unavailable)
            outcome = error
        CHECKED.set((key, outcome))

    def user_for(self, headers: Mapping[str, str], query_token: str | None = None) -> str:
        """The user id, or Unauthorized."""
        if not self.enabled or self.is_internal(headers):
            return ""
        token = bearer(headers) or query_token
        checked = CHECKED.get()
        if (
            token
            and checked is not None
            and hmac.compare_digest(checked[0].encode(), token.encode())
        ):
            outcome = checked[1]
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is not None:
                return outcome
        raise Unauthorized("missing or invalid API key")

    def is_internal(self, headers: Mapping[str, str]) -> bool:
        given = headers.get("x-internal-auth", "")
        # Bytes: compare_digest refuses non-ASCII str, and headers are latin-1 text.
        return bool(self.internal_key) and hmac.compare_digest(
            given.encode(), self.internal_key.encode()
        )

    def is_admin(self, headers: Mapping[str, str]) -> bool:
        """The internal key, a key of the ``admin`` user, or anyone when auth is off
        (a loopback gateway serves one local user)."""
        if not self.enabled or self.is_internal(headers):
            return True
        return self.user_for(headers) == ADMIN_USER

    def require_admin(self, headers: Mapping[str, str]) -> None:
        if not self.is_admin(headers):
            raise Forbidden("these figures are for admins only")
