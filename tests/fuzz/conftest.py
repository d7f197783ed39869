"""The fuzz tier: Hypothesis and Schemathesis against the real mesh.

``make test`` runs it derandomized (a fixed seed) with ``FUZZ_EXAMPLES`` examples per
test (25 by default); ``make fuzz`` runs the same tests with thousands, still bounded.
The mesh runs in a thread of its own: Hypothesis drives synchronous tests, and the
in-process servers need a running event loop meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support.mesh import Mesh, running_mesh

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
settings.register_profile(
    "fuzz",
    max_examples=EXAMPLES,
    derandomize=os.environ.get("FUZZ_RANDOM") != "1",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FUZZ = settings.get_profile("fuzz")

UNHANDLED = (
    "Exception in ASGI application",
    "Task exception was never retrieved",
    "Task was destroyed but it is pending",
    "message handling crashed",
    "stream reader failed",
)


class Problems(logging.Handler):
    """Log records that mean an unhandled exception somewhere in the mesh."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info or any(marker in message for marker in UNHANDLED):
            self.found.append(f"{record.name}: {message}")


@contextlib.contextmanager
def mesh_in_thread(database_url: str, **overrides: Any) -> Iterator[Mesh]:
    """The whole mesh on its own event loop in a daemon thread."""
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        holder["stop"], holder["loop"] = stop, asyncio.get_running_loop()
        try:
            async with running_mesh(database_url, **overrides) as mesh:
                holder["mesh"] = mesh
                ready.set()
                await stop.wait()
        finally:
            ready.set()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    ready.wait(60)
    if "mesh" not in holder:
        raise RuntimeError("the mesh did not start")
    try:
        yield holder["mesh"]
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(30)


@pytest.fixture
def fuzz_mesh(database_url: str) -> Iterator[Mesh]:
    """A single-agent mesh (fast turns) whose logs must stay free of unhandled errors."""
    problems = Problems()
    logging.getLogger().addHandler(problems)
    try:
        with mesh_in_thread(database_url, multi_agent_mode=False) as mesh:
            yield mesh
    finally:
        logging.getLogger().removeHandler(problems)
    assert problems.found == [], problems.found[:5]
