"""Server interceptors: internal auth, then errors + metrics around every handler.

grpc.aio interceptors see only the method name, so both wrap the handler's
behaviour function, keeping its kind (unary/streaming in and out).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from services.common.errors import ErrorKind, ServiceError
from services.common.metrics import GRPC_CALLS, GRPC_LATENCY, GRPC_OPEN_STREAMS

log = logging.getLogger(__name__)

ERROR_CODE_KEY = "x-error-code"
ERROR_DETAILS_KEY = "x-error-details"
AUTH_KEY = "x-internal-auth"
# Health probes and schema discovery need no secret: they reveal nothing private.
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

STATUS_BY_KIND = {
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.CONFLICT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.PERMISSION: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.ABORTED: grpc.StatusCode.ABORTED,
    ErrorKind.EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
}

Behaviour = Callable[..., Any]
Wrap = Callable[[Behaviour, bool, bool], Behaviour]


def _rebuild(handler: grpc.RpcMethodHandler, wrap: Wrap) -> grpc.RpcMethodHandler:
    """The same handler with its behaviour wrapped."""
    req_stream, resp_stream = handler.request_streaming, handler.response_streaming
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if req_stream and resp_stream:
        return grpc.stream_stream_rpc_method_handler(
            wrap(handler.stream_stream, True, True), **kwargs
        )
    if req_stream:
        return grpc.stream_unary_rpc_method_handler(
            wrap(handler.stream_unary, True, False), **kwargs
        )
    if resp_stream:
        return grpc.unary_stream_rpc_method_handler(
            wrap(handler.unary_stream, False, True), **kwargs
        )
    return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary, False, False), **kwargs)


class AuthInterceptor(aio.ServerInterceptor):
    """Refuse calls whose ``x-internal-auth`` metadata is not the internal key."""

    def __init__(self, key: str) -> None:
        self._key = key.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIXES):
            return handler
        given = next((v for k, v in details.invocation_metadata or () if k == AUTH_KEY), "")
        given_bytes = given.encode() if isinstance(given, str) else bytes(given)
        if hmac.compare_digest(given_bytes, self._key):
            return handler

        def deny(_: Behaviour, req_stream: bool, resp_stream: bool) -> Behaviour:
            async def abort(request: Any, context: aio.ServicerContext[Any, Any]) -> None:
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "missing or invalid x-internal-auth",
                    trailing_metadata=((ERROR_CODE_KEY, "UNAUTHORIZED"),),
                )

            if resp_stream:

                async def abort_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                    await abort(request, context)
                    yield  # pragma: no cover - abort raises

                return abort_stream
            return abort

        return _rebuild(handler, deny)


Ending = tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]
"""How a call ends: its status, details and trailing metadata."""


def ending_of(error: BaseException) -> Ending:
    """How a call whose handler raised ``error`` ends: a ServiceError's kind as the status,
    its code (and details) in the trailers; anything else INTERNAL_ERROR (the caller logs
    it: a bug)."""
    if isinstance(error, ServiceError):
        trailing: tuple[tuple[str, str], ...] = ((ERROR_CODE_KEY, error.code),)
        if error.details:
            # ASCII JSON: a plain (non -bin) metadata value must be printable ASCII.
            trailing += ((ERROR_DETAILS_KEY, json.dumps(error.details, default=str)),)
        return STATUS_BY_KIND[error.kind], error.message, trailing
    return grpc.StatusCode.INTERNAL, "internal error", ((ERROR_CODE_KEY, "INTERNAL_ERROR"),)


async def _abort_for(error: BaseException, context: aio.ServicerContext[Any, Any]) -> None:
    if not isinstance(error, ServiceError):
        log.exception("unhandled error in handler", exc_info=error)
    status, details, trailing = ending_of(error)
    await context.abort(status, details, trailing_metadata=trailing)


class ObservingInterceptor(aio.ServerInterceptor):
    """Map ServiceError to a status (code in trailing metadata) and record metrics.

    A method's observed handler and its metric children are built once, on its first call
    (a service's handlers are fixed when it starts): a call costs a dictionary lookup here,
    not a rebuilt handler and three label lookups."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._observed: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(EXEMPT_PREFIXES):
            return handler
        known = self._observed.get(details.method)
        if known is None or known[0] is not handler:
            known = self._observed[details.method] = (handler, self._observe(details, handler))
        return known[1]

    def _observe(
        self, details: grpc.HandlerCallDetails, handler: grpc.RpcMethodHandler
    ) -> grpc.RpcMethodHandler:
        method = details.method.rsplit("/", 1)[-1]
        latency = GRPC_LATENCY.labels(service=self._service, method=method)
        open_streams = GRPC_OPEN_STREAMS.labels(service=self._service, method=method)
        calls: dict[str, Any] = {}

        def finish(started: float, code: str) -> None:
            counter = calls.get(code)
            if counter is None:
                counter = calls[code] = GRPC_CALLS.labels(
                    service=self._service, method=method, code=code
                )
            counter.inc()
            latency.observe(time.perf_counter() - started)

        def observe(behaviour: Behaviour, req_stream: bool, resp_stream: bool) -> Behaviour:
            if resp_stream:

                async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
                    started, code = time.perf_counter(), "OK"
                    open_streams.inc()
                    try:
                        async for item in behaviour(request, context):
                            yield item
                    except aio.AbortError:
                        code = "ABORTED_BY_HANDLER"
                        raise
                    except Exception as error:
                        code = getattr(error, "code", "INTERNAL_ERROR")
                        await _abort_for(error, context)
                    finally:
                        open_streams.dec()
                        finish(started, str(code))

                return streaming

            async def unary(request: Any, context: Any) -> Any:
                started, code = time.perf_counter(), "OK"
                try:
                    return await behaviour(request, context)
                except aio.AbortError:
                    code = "ABORTED_BY_HANDLER"
                    raise
                except Exception as error:
                    code = getattr(error, "code", "INTERNAL_ERROR")
                    await _abort_for(error, context)
                finally:
                    finish(started, str(code))

            return unary

        return _rebuild(handler, observe)
