"""Tracing is off without OTEL_EXPORTER_OTLP_ENDPOINT and exports over OTLP/gRPC with it;
log lines inside a span carry its trace id."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncGenerator, Iterator
from concurrent import futures
from typing import Any, cast

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from services.common import tracing
from services.common.logs import JsonFormatter
from services.common.settings import Settings


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP collector's trace endpoint that keeps what it receives."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, bytes]] = []
        self.received = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                self.spans.extend((service, s.name, s.trace_id) for s in scope.spans)
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def collector() -> Iterator[tuple[Collector, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0)


def test_tracing_is_off_without_an_endpoint() -> None:
    assert tracing.configure("hitl", Settings.from_env({})) is None
    assert not tracing.enabled()
    assert tracing.server_interceptors() == [] and tracing.client_interceptors() == []
    with tracing.new_trace("ignored") as span:
        assert not span.get_span_context().is_valid


def test_spans_are_exported_over_otlp_when_the_endpoint_is_set(
    collector: tuple[Collector, int],
) -> None:
    received, port = collector
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    provider = tracing.configure("orchestrator", Settings.from_env(env))
    try:
        assert provider is not None and tracing.enabled()
        assert len(tracing.server_interceptors()) == 1
        assert len(tracing.client_interceptors()) == 4
        with tracing.new_trace("exported") as span:
            trace_id = span.get_span_context().trace_id
        assert provider.force_flush(10_000)
        assert received.received.wait(10)
    finally:
        tracing.shutdown()
        tracing.use(None)
    assert received.spans == [("orchestrator", "exported", trace_id.to_bytes(16, "big"))]


def test_log_lines_inside_a_span_carry_its_trace_id() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    tracing.use(provider)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "inside", (), None)
    try:
        with tracing.tracer().start_as_current_span("work") as span:
            line = json.loads(JsonFormatter("llmproxy").format(record))
        outside = json.loads(JsonFormatter("llmproxy").format(record))
    finally:
        tracing.use(None)
        provider.shutdown()
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert line["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in outside


async def test_a_stream_left_early_is_closed_at_once_with_tracing_off() -> None:
    assert not tracing.enabled()
    closed: list[str] = []

    @tracing.traced_stream(lambda: "numbers")
    async def numbers() -> Any:
        try:
            for n in range(10):
                yield n
        finally:
            closed.append("inner")

    stream = numbers()
    assert await anext(stream) == 0
    await cast(AsyncGenerator[int, None], stream).aclose()  # the consumer stops after one
    assert closed == ["inner"]
