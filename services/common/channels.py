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


class _WithKey:
    """A multicallable that adds ``x-internal-auth`` to every call's metadata."""

    __slots__ = ("_inner", "_pair")

    def __init__(self, inner: Callable[..., Any], pair: tuple[str, str]) -> None:
        self._inner, self._pair = inner, pair

    def __call__(self, *args: Any, metadata: Any = None, **kwargs: Any) -> Any:
        pairs = (*metadata, self._pair) if metadata else (self._pair,)
        return self._inner(*args, metadata=pairs, **kwargs)


class KeyedChannel(aio.Channel):
    """A channel whose every call carries the internal key. Added per call rather than by a
    client interceptor: grpc.aio runs an interceptor through a task and wrappers of its
    own for each call, ~0.4 ms more to open a stream (docs/decisions.md)."""

    def __init__(self, channel: aio.Channel, key: str) -> None:
        self._channel = channel
        self._pair = (AUTH_KEY, key)

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithKey(self._channel.unary_unary(*args, **kwargs), self._pair)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithKey(self._channel.unary_stream(*args, **kwargs), self._pair)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithKey(self._channel.stream_unary(*args, **kwargs), self._pair)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithKey(self._channel.stream_stream(*args, **kwargs), self._pair)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    async def __aenter__(self) -> KeyedChannel:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def replicas(addresses: str) -> list[str]:
    """The ``host:port`` entries of ``a:1,b:2`` (one per replica listed)."""
    return [a.strip() for a in addresses.split(",") if a.strip()]


def target(addresses: str) -> str:
    """``host:port`` or ``a:1,b:2`` (replicas) -> a gRPC target string."""
    parts = replicas(addresses)
    if len(parts) == 1:
        return parts[0]
    return "ipv4:" + ",".join(parts)


def internal_channel(addresses: str, key: str, tls: MeshTls | None = None) -> aio.Channel:
    """A mesh-internal channel that authenticates every call; TLS when ``tls`` is given."""
    interceptors = tracing.client_interceptors() or None
    if tls is None:
        channel = aio.insecure_channel(
            target(addresses), options=CHANNEL_OPTIONS, interceptors=interceptors
        )
    else:
        channel = aio.secure_channel(
            target(addresses),
            tls.channel_credentials(),
            options=CHANNEL_OPTIONS,
            interceptors=interceptors,
        )
    return KeyedChannel(channel, key)


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
