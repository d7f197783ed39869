"""Prometheus metrics shared by the gRPC services, and the scrape endpoint."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

GRPC_CALLS = Counter(
    "codelab_grpc_calls_total", "gRPC calls handled", ["service", "method", "code"]
)
GRPC_LATENCY = Histogram(
    "codelab_grpc_call_seconds",
    "gRPC call duration (streams: until the stream ends)",
    ["service", "method"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600),
)
GRPC_OPEN_STREAMS = Gauge(
    "codelab_grpc_open_streams", "Server streams currently open", ["service", "method"]
)


def serve_metrics(grpc_port: int, offset: int, host: str = "127.0.0.1") -> int | None:
    """Expose /metrics on host:grpc_port + offset (offset 0 disables); return the port."""
    if offset == 0 or grpc_port == 0:
        return None
    port = grpc_port + offset
    try:
        start_http_server(port, addr=host)
    except OSError as error:
        # A busy metrics port must not keep the service itself from serving.
        log.warning("metrics port unavailable", extra={"fields": {"port": port, "err": str(error)}})
        return None
    return port
