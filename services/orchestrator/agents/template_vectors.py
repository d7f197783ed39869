"""``agent_templates.embedding``: each active version's capability text as a vector.

The vectors come from toolsearch's agent directory (the same model that ranks agents),
so the column holds what the directory compares, for SQL and for other consumers. A job
fills what is missing: built-ins after start, an admin's new version within seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from services.common.db import Pool
from services.common.errors import ServiceError
from services.orchestrator.agents.template_store import TemplateStore
from services.orchestrator.agents.templates import AgentTemplate

log = logging.getLogger(__name__)
# [(key, text)] -> [(key, vector)]
Embed = Callable[[Sequence[tuple[str, str]]], Awaitable[list[tuple[str, list[float]]]]]
FILL_EVERY = 5.0


async def fill_embeddings(pool: Pool, embed: Embed) -> int:
    """Embed every active version without a vector; the number written."""
    store = TemplateStore(pool)
    templates = [AgentTemplate.from_row(row) for row in await store.unembedded()]
    if not templates:
        return 0
    keys = {f"{t.name}@{t.version}": t for t in templates}
    vectors = await embed([(key, t.capability_text()) for key, t in keys.items()])
    for key, vector in vectors:
        template = keys[key]
        await store.set_embedding(template.name, template.version, vector)
    return len(vectors)


async def keep_embedded(pool: Pool, embed: Embed, every: float = FILL_EVERY) -> None:
    """Fill missing vectors now and every ``every`` seconds (toolsearch may come up later
    than this process; an admin may add a version any time)."""
    while True:
        try:
            written = await fill_embeddings(pool, embed)
            if written:
                log.info("template vectors written", extra={"fields": {"count": written}})
        except ServiceError as error:
            log.warning("template vectors not written", extra={"fields": {"err": error.message}})
        except Exception as error:  # e.g. asyncpg's own errors while Postgres restarts
            # A job that runs for the process's life must outlive a surprise: try again.
            log.warning("template vectors not written", extra={"fields": {"err": repr(error)}})
        await asyncio.sleep(every)
