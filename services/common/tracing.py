"""OpenTelemetry traces for every process: off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

One SDK provider per process (``configure``; tests install theirs with ``use``). While it
is on, the maintained gRPC instrumentation rides on every server and channel the mesh
builds (W3C trace context in the call metadata), the ASGI instrumentation on the gateway,
and ``traced`` / ``traced_stream`` wrap the domain's hook points. While it is off none of
these is installed: the hot path pays nothing.
"""

from __future__ import annotations

import contextlib
import functools
import re
import urllib.parse
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    MutableMapping,
)
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, Span, Status, StatusCode

from services.common.settings import Settings

P = ParamSpec("P")
T = TypeVar("T")
Attributes = Mapping[str, str | int | float | bool]

_state: dict[str, TracerProvider | None] = {"provider": None}
# Query parameter names that carry a credential (the WebSocket's deprecated `?token=`).
_SECRET_PARAM = re.compile(r"token|key|secret|passw|auth|signature|credential", re.IGNORECASE)
_NOOP = trace.NoOpTracer()


def configure(service: str, settings: Settings) -> TracerProvider | None:
    """Export this process's spans over OTLP/gRPC when the endpoint is set; else stay off."""
    if not settings.otel_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    # The exporter reads the other OTEL_EXPORTER_OTLP_* variables (headers, TLS) itself.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(settings.otel_endpoint)))
    use(provider)
    return provider


def use(provider: TracerProvider | None) -> None:
    """Make ``provider`` this process's (None: tracing off)."""
    _state["provider"] = provider


def enabled() -> bool:
    return _state["provider"] is not None


def tracer() -> trace.Tracer:
    provider = _state["provider"]
    return provider.get_tracer("codelab") if provider is not None else _NOOP


def shutdown() -> None:
    """Flush and stop the exporter (a process's last step)."""
    provider = _state["provider"]
    if provider is not None:
        provider.shutdown()


def server_interceptors() -> list[Any]:
    """The gRPC server instrumentation (health checks and reflection are not traced)."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    quiet = filters.negate(
        filters.any_of(filters.health_check(), filters.service_prefix("grpc.reflection"))
    )
    server = aio_server_interceptor(tracer_provider=_state["provider"], filter_=quiet)  # type: ignore[no-untyped-call]
    return [server]


def client_interceptors() -> list[Any]:
    """The gRPC client instrumentation: a span per call, its context in the metadata."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    quiet = filters.negate(filters.health_check())
    return list(aio_client_interceptors(tracer_provider=_state["provider"], filter_=quiet))  # type: ignore[no-untyped-call]


def secret_query_values(query: str) -> list[str]:
    """Every spelling (raw, %-decoded, +-decoded) of the values of key-bearing query
    parameters (``token``, ``api_key``, ``secret``...), longest first."""
    found: set[str] = set()
    for pair in query.split("&"):
        name, _, raw = pair.partition("=")
        if raw and _SECRET_PARAM.search(urllib.parse.unquote_plus(name)):
            found |= {raw, urllib.parse.unquote(raw), urllib.parse.unquote_plus(raw)}
    return sorted(found - {""}, key=lambda value: (-len(value), value))


def _redact_request(span: Span, scope: Mapping[str, Any]) -> None:
    """Server request hook: the instrumentation records the full URL (``http.url``,
    ``url.query``), so a deprecated ``?token=`` would be exported in clear. Every attribute
    holding a key-bearing parameter's value gets ``REDACTED`` in its place."""
    raw = scope.get("query_string") or b""
    secrets = secret_query_values(raw.decode("latin-1") if isinstance(raw, bytes) else str(raw))
    if not secrets:
        return
    attributes: Mapping[str, Any] = getattr(span, "attributes", None) or {}
    for name, value in list(attributes.items()):
        if isinstance(value, str) and any(secret in value for secret in secrets):
            for secret in secrets:
                value = value.replace(secret, "REDACTED")
            span.set_attribute(name, value)


def instrument_app(app: Any) -> None:
    """The ASGI instrumentation on the gateway: one span per request or WebSocket
    connection, none per frame sent or received (a token is a frame); keys in the query
    string are redacted from the span."""
    if not enabled():
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app,
        server_request_hook=_redact_request,
        tracer_provider=_state["provider"],
        excluded_urls="/health,/metrics",
        exclude_spans=["send", "receive"],
    )


def inject(carrier: MutableMapping[str, str]) -> None:
    """Write the current context (W3C ``traceparent``) into ``carrier``."""
    propagate.inject(carrier)


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    return propagate.extract(carrier)


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span in hex, when there is one."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


@contextlib.contextmanager
def new_trace(name: str, attributes: Attributes | None = None) -> Iterator[Span]:
    """A root span (a trace of its own) linked to the current span: one unit of work that
    arrived on a long-lived connection."""
    if not enabled():
        yield trace.INVALID_SPAN
        return
    current = trace.get_current_span().get_span_context()
    links = [Link(current)] if current.is_valid else []
    with tracer().start_as_current_span(
        name, context=otel_context.Context(), links=links, attributes=attributes
    ) as span:
        yield span


def traced(
    name: Callable[..., str],
    attributes: Callable[..., Attributes] | None = None,
    parent: Callable[..., otel_context.Context | None] | None = None,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Run a coroutine function inside a span named ``name(*args)``; ``parent(*args)`` may
    pick the parent context (else the current one)."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            if not enabled():
                return await fn(*args, **kwargs)
            with tracer().start_as_current_span(
                name(*args, **kwargs),
                context=parent(*args, **kwargs) if parent else None,
                attributes=attributes(*args, **kwargs) if attributes else None,
            ):
                return await fn(*args, **kwargs)

        return wrapper

    return decorate


async def _close(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


def traced_stream(
    name: Callable[..., str],
    attributes: Callable[..., Attributes] | None = None,
    observe: Callable[[Span, Any], None] | None = None,
) -> Callable[[Callable[P, AsyncIterator[T]]], Callable[P, AsyncIterator[T]]]:
    """Run an async generator function inside one span (not one per item); ``observe``
    sees each item. The span is current only while the generator itself runs, so the
    consumer's code between items is not attributed to it."""

    def decorate(fn: Callable[P, AsyncIterator[T]]) -> Callable[P, AsyncIterator[T]]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            # Tracing off: the generator itself, no generator around it re-yielding each item.
            return spanned(*args, **kwargs) if enabled() else fn(*args, **kwargs)

        async def spanned(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            span = tracer().start_span(
                name(*args, **kwargs),
                attributes=attributes(*args, **kwargs) if attributes else None,
            )
            inner = fn(*args, **kwargs)
            try:
                while True:
                    token = otel_context.attach(trace.set_span_in_context(span))
                    try:
                        item = await anext(inner)
                    except StopAsyncIteration:
                        return
                    finally:
                        otel_context.detach(token)
                    if observe is not None:
                        observe(span, item)
                    yield item
            except BaseException as error:
                if not isinstance(error, GeneratorExit):
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                raise
            finally:
                await _close(inner)
                span.end()

        return wrapper

    return decorate
