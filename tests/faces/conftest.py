from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser

from tests.faces.browser import chromium
from tests.support.mesh import Mesh, running_mesh


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """The whole mesh in-process (real gRPC on free ports, real Postgres, scripted model)."""
    async with running_mesh(database_url) as running:
        yield running


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for every browser test."""
    async with chromium() as running:
        yield running
