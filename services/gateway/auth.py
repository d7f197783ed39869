"""IDE client authentication (GATEWAY_API_KEYS) and the loopback guard.

With keys configured every IDE-facing endpoint but /health wants
``Authorization: Bearer <key>`` (WebSocket: the header or ``?token=``) and the
key's user owns the sessions it creates. Without keys the gateway serves only
loopback, as a single local user. ``X-Internal-Auth`` with the internal key is
also accepted (seed 000's internal endpoints).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping

from services.common.settings import Settings, SettingsError

ADMIN_USER = "admin"


class Unauthorized(Exception):
    """No or a wrong credential."""


class Forbidden(Exception):
    """A valid credential without the right (admin-only figures)."""


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


class Authenticator:
    """Maps a request's credentials to a user id ('' when auth is off)."""

    def __init__(self, api_keys: Mapping[str, str], internal_key: str) -> None:
        self.api_keys = dict(api_keys)
        self.internal_key = internal_key

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys)

    def user_for(self, headers: Mapping[str, str], query_token: str | None = None) -> str:
        """The user id, or Unauthorized."""
        if not self.enabled:
            return ""
        internal = headers.get("x-internal-auth")
        if internal and self.internal_key and hmac.compare_digest(internal, self.internal_key):
            return ""
        token = query_token
        header = headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            token = header[7:].strip()
        if token:
            for key, user in self.api_keys.items():
                if hmac.compare_digest(token, key):
                    return user
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
