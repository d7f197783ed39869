from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common import tracing
from tests.support.mesh import Mesh, running_mesh


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """The whole mesh in-process (real gRPC on free ports, real Postgres, scripted model)."""
    async with running_mesh(database_url) as running:
        yield running


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans of the running test, kept in memory: every service in the process traces to it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use(provider)
    yield memory
    tracing.use(None)
    provider.shutdown()
