"""The orchestrator's unit tests: a session Runtime over the test's database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.common.db import Pool
from services.orchestrator.session.runtime import Runtime
from tests.support.routing import Routing, routing_over
from tests.support.runtime import running_runtime


@pytest.fixture
async def runtime(pool: Pool) -> AsyncIterator[Runtime]:
    async with running_runtime(pool) as running:
        yield running


@pytest.fixture
async def routing(pool: Pool) -> AsyncIterator[Routing]:
    async with routing_over(pool) as running:
        yield running
