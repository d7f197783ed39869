"""Long loops of Python work that let the rest of the process run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

T = TypeVar("T")


async def in_slices(items: Sequence[T], size: int) -> AsyncIterator[Sequence[T]]:
    """``items`` ``size`` at a time, the event loop let run between slices: one long loop
    over thousands of items holds every other task of the process until it ends."""
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        yield items[start : start + size]
