"""Per-key (per-user) limits, counted in Postgres so that every replica sees one count.

Messages per minute are taken in one conditional upsert (two replicas cannot both take
the last one). Tokens and cost are known only after a model call: the call is refused
once the day's count has reached the limit, and its usage is added when it ends, so a
burst of calls already in flight may pass the limit by those calls; they are counted
with no limit set too, so ``/events/metrics`` shows real use. The additions are written
behind the calls (services/common/write_behind.py: no model call waits for its count, and
many calls' counts are one statement); a read of this process's counters waits for them.
Sessions open at once are counted under a per-user advisory lock while the new session is
created.
Windows are fixed: a clock minute and a UTC day, on the database's clock.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from services.common.db import Pool, db_errors
from services.common.limit_settings import LimitSettings
from services.common.sql import load_queries
from services.common.write_behind import WriteBehind
from services.orchestrator.errors import BudgetExceeded, RateLimited
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "limits.sql")
MINUTE = 60.0
DAY = 86400.0
MESSAGES, TOKENS, COST = "messages", "tokens", "cost_usd"


@dataclass(frozen=True)
class Usage:
    """One limit: ``used`` of ``limit`` (0: off); ``resets_in`` seconds to its next window."""

    name: str
    used: float
    limit: float
    resets_in: float


def retry_after(seconds: float) -> int:
    """Whole seconds a client waits before trying again (at least one)."""
    return max(1, math.ceil(seconds))


class UserLimits:
    """Checks and counts one user's usage against ``settings``; '' (no auth) is a user too."""

    def __init__(self, pool: Pool, settings: LimitSettings) -> None:
        self.pool = pool
        self.settings = settings
        self._users: dict[str, str] = {}
        self._counts: WriteBehind[tuple[str, float, float]] = WriteBehind(
            self._add, "usage counters"
        )

    async def user_of(self, session_id: str) -> str:
        """The session's owner (a delegate's session has its parent's owner)."""
        user = self._users.get(session_id)
        if user is None:
            async with db_errors("read session", "DB_READ_ERROR"):
                found = await self.pool.fetchval(QUERIES["session_user"], session_id)
            user = found or ""
            self.owner_is(session_id, user)
        return user

    def owner_is(self, session_id: str, user_id: str) -> None:
        """Remember the owner of ``session_id`` (an owner never changes)."""
        if len(self._users) > 50_000:
            self._users.clear()
        self._users[session_id] = user_id

    async def admit_session(
        self,
        session_id: str,
        user_id: str,
        agent: str,
        title: str = "",
        system_prompt: str = "",
    ) -> None:
        """Create ``session_id`` for ``user_id`` unless that passes LIMIT_SESSIONS_OPEN;
        an existing session is always admitted (the caller checks its owner)."""
        limit = self.settings.sessions_open
        if not limit:
            return
        idle = self.settings.session_idle_seconds
        opening = db_errors("open session", "DB_WRITE_ERROR")
        async with opening, self.pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["lock_user_sessions"], user_id)
            if await conn.fetchval(QUERIES["session_exists"], session_id):
                return
            row = await conn.fetchrow(QUERIES["open_sessions"], user_id, idle)
            if row["open"] >= limit:
                raise RateLimited(
                    f"{row['open']} sessions are open; the limit is {limit} at once",
                    limit="sessions_open",
                    used=row["open"],
                    max=limit,
                    retry_after=retry_after(row["frees_in"]),
                )
            await conn.execute(
                QUERIES["create_session"], session_id, user_id, title, system_prompt, agent
            )

    async def admit_message(self, user_id: str) -> None:
        """Take one of the minute's user messages, or raise RateLimited."""
        limit = self.settings.messages_per_minute
        if not limit:
            return
        async with db_errors("count messages", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(QUERIES["take"], user_id, MESSAGES, MINUTE, 1, limit)
        if row["amount"] is None:
            raise RateLimited(
                f"more than {limit} messages a minute",
                limit="messages_per_minute",
                max=limit,
                retry_after=retry_after(row["resets_in"]),
            )

    async def admit_model_call(self, session_id: str, user_id: str | None = None) -> None:
        """Before an upstream call: raise BudgetExceeded when the day's budget is spent
        (``user_id``'s: for a session that may not exist yet, its owner to be)."""
        tokens, cost = self.settings.tokens_per_day, self.settings.cost_per_day
        if not tokens and not cost:
            return
        user = user_id if user_id is not None else await self.user_of(session_id)
        for usage in await self._today(user):
            if usage.limit and usage.used >= usage.limit:
                raise BudgetExceeded(
                    f"the daily {usage.name} budget ({usage.limit:g}) is spent",
                    limit=usage.name,
                    used=round(usage.used, 6),
                    max=usage.limit,
                    retry_after=retry_after(usage.resets_in),
                )

    async def record(
        self, session_id: str, model: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Count a finished model call's tokens and cost for the day, with or without a
        limit on them: ``/events/metrics`` shows real use either way (queued, see above)."""
        user = await self.user_of(session_id)
        cost = self.settings.price_of(model).cost(prompt_tokens, completion_tokens)
        self._counts.put((user, prompt_tokens + completion_tokens, cost))

    async def settled(self) -> None:
        """Every count queued so far is added (or its write failed)."""
        await self._counts.settled()

    async def _add(self, counts: list[tuple[str, float, float]]) -> None:
        sums: defaultdict[tuple[str, str], float] = defaultdict(float)
        for user, tokens, cost in counts:
            sums[user, TOKENS] += tokens
            sums[user, COST] += cost
        async with db_errors("count usage", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["add"],
                [user for user, _ in sums],
                [metric for _, metric in sums],
                list(sums.values()),
                DAY,
            )

    async def _today(self, user_id: str) -> list[Usage]:
        await self.settled()
        async with db_errors("read usage", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["read"], user_id, [TOKENS, COST], DAY)
        by_metric = {r["metric"]: r for r in rows}
        limits = {TOKENS: self.settings.tokens_per_day, COST: self.settings.cost_per_day}
        return [
            Usage(
                "tokens_per_day" if metric == TOKENS else "cost_per_day",
                by_metric[metric]["amount"],
                limits[metric],
                by_metric[metric]["resets_in"],
            )
            for metric in (TOKENS, COST)
        ]

    async def report(self, user_id: str) -> list[Usage]:
        """The user's usage against every limit (limit 0: off)."""
        settings = self.settings
        async with db_errors("read usage", "DB_READ_ERROR"):
            minute = await self.pool.fetchrow(QUERIES["read"], user_id, [MESSAGES], MINUTE)
            sessions = await self.pool.fetchrow(
                QUERIES["open_sessions"], user_id, settings.session_idle_seconds
            )
        return [
            Usage("sessions_open", sessions["open"], settings.sessions_open, 0.0),
            Usage(
                "messages_per_minute",
                minute["amount"],
                settings.messages_per_minute,
                minute["resets_in"],
            ),
            *await self._today(user_id),
        ]

    async def prune(self) -> None:
        """Forget windows that ended long ago."""
        async with db_errors("prune usage", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["prune"])
