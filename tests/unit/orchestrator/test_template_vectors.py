"""The job that keeps agent templates embedded outlives any failure of a round."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from services.common.db import Pool
from services.orchestrator.agents.template_store import TemplateStore
from services.orchestrator.agents.template_vectors import keep_embedded
from services.orchestrator.agents.templates import install_templates


async def test_a_surprising_failure_is_retried_not_the_end_of_the_job(pool: Pool) -> None:
    await install_templates(pool)
    store = TemplateStore(pool)
    assert await store.unembedded()
    rounds: list[int] = []

    async def embed(items: Sequence[tuple[str, str]]) -> list[tuple[str, list[float]]]:
        rounds.append(len(items))
        if len(rounds) == 1:
            raise RuntimeError("not a ServiceError: a driver's own failure")
        return [(key, [0.1] * 384) for key, _ in items]

    job = asyncio.create_task(keep_embedded(pool, embed, every=0.01))
    try:
        async with asyncio.timeout(10):
            while await store.unembedded():  # noqa: ASYNC110 - the rows are the signal
                await asyncio.sleep(0.01)
    finally:
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
    assert len(rounds) >= 2 and rounds[0] == rounds[1]
