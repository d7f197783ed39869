"""Work started beside the caller, who awaits it later."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def _log_unawaited(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("background write failed", extra={"fields": {"err": str(task.exception())}})


def background(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``work`` beside the caller, who awaits it later; a failure nobody awaited
    (the turn was cancelled meanwhile) is logged rather than lost."""
    task = asyncio.create_task(work)
    task.add_done_callback(_log_unawaited)
    return task
