"""Reading a session's row once its turn has ended (the runtime closes it after `done`)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.db import Pool


async def settled_session(pool: Pool, session_id: str, seconds: float = 10) -> dict[str, Any]:
    """The session's row once no turn runs (``done`` reaches the IDE before the turn's
    last write)."""
    async with asyncio.timeout(seconds):
        while True:
            row = await pool.fetchrow(
                "select * from orchestrator.sessions where session_id = $1", session_id
            )
            if row is not None and row["turn_state"] == "idle":
                return dict(row)
            await asyncio.sleep(0.02)
