"""Client channels between services: internal auth on every call, round robin, TLS when
configured (services/common/tls.py), trace context when tracing is on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
from grpc import aio

from services.common import tracing
from services.common.interceptors import AUTH_KEY
from services.common.settings import Settings
from services.common.tls import MeshTls

CHANNEL_OPTIONS = (
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 32 * 1024 * 1024),
    ("grpc.max_send_message_length", 32 * 1024 * 1024),
    ("grpc.enable_retries", 1),
)


class _AuthMetadata:
    """Adds ``x-internal-auth`` to an outgoing call's metadata."""

    def __init__(self, key: str) -> None:
        self._pair = (AUTH_KEY, key)

    def _details(self, details: Any) -> Any:
        metadata = aio.Metadata(*(details.metadata or ()))
        metadata.add(*self._pair)
        return details._replace(metadata=metadata)


# grpc.aio sorts interceptors by the first kind they implement (an if/elif chain),
# so each call kind needs its own class.
class _UnaryUnary(_AuthMetadata, aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)


class _UnaryStream(_AuthMetadata, aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)


class _StreamUnary(_AuthMetadata, aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(self._details(details), request_iterator)


class _StreamStream(_AuthMetadata, aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(self._details(details), request_iterator)


def target(addresses: str) -> str:
    """``host:port`` or ``a:1,b:2`` (replicas) -> a gRPC target string."""
    parts = [a.strip() for a in addresses.split(",") if a.strip()]
    if len(parts) == 1:
        return parts[0]
    return "ipv4:" + ",".join(parts)


def internal_channel(addresses: str, key: str, tls: MeshTls | None = None) -> aio.Channel:
    """A mesh-internal channel that authenticates every call; TLS when ``tls`` is given."""
    interceptors = [
        *tracing.client_interceptors(),
        *(kind(key) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)),
    ]
    if tls is None:
        return aio.insecure_channel(
            target(addresses), options=CHANNEL_OPTIONS, interceptors=interceptors
        )
    return aio.secure_channel(
        target(addresses),
        tls.channel_credentials(),
        options=CHANNEL_OPTIONS,
        interceptors=interceptors,
    )


def mesh_channel(settings: Settings, addresses: str) -> aio.Channel:
    """The channel a service opens to another: its key, its TLS material."""
    return internal_channel(
        addresses, settings.require_internal_key(), MeshTls.from_settings(settings)
    )


def error_code(error: grpc.RpcError) -> str | None:
    """The spec error code a mesh service put in the trailing metadata, if any."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == "x-error-code":
            return str(value)
    return None


def error_details(error: grpc.RpcError) -> dict[str, Any]:
    """The details (e.g. ``retry_after``) a mesh service sent with its error, if any."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == "x-error-details":
            try:
                details = json.loads(value)
            except ValueError:
                return {}
            return details if isinstance(details, dict) else {}
    return {}
