"""Accounting is written behind the calls: many calls' rows in one statement, and a read
of this process's usage sees every call recorded before it."""

from __future__ import annotations

from asyncpg import Pool

from services.common.limit_settings import LimitSettings, Price
from services.llmproxy.store import RequestRecord, UsageStore
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.state.store import SessionStore


def call(session_id: str, prompt: int, completion: int, success: bool = True) -> RequestRecord:
    return RequestRecord(
        session_id=session_id,
        purpose="turn",
        model="m",
        duration_ms=12.5,
        success=success,
        error_code=None if success else "LLM_TIMEOUT",
        prompt_tokens=prompt,
        completion_tokens=completion,
        with_tools=success,
    )


async def test_request_records_queued_together_are_read_back_at_once(pool: Pool) -> None:
    store = UsageStore(pool)
    for n in range(5):
        store.record(call("acct-1", 10 * n, 1))
    store.record(call("acct-1", 0, 0, success=False))
    store.record(call("acct-2", 7, 3))
    usage = await store.usage("acct-1")  # waits for the queued rows: nothing is missing
    assert (usage.total_requests, usage.successful_requests, usage.failed_requests) == (6, 5, 1)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.requests_with_tools) == (100, 5, 5)
    assert (await store.usage("acct-2")).total_tokens == 10
    rows = await pool.fetchval("select count(*) from llmproxy.llm_requests")
    assert rows == 7


async def test_sessions_written_in_one_batch_are_listed_by_when_their_calls_started(
    pool: Pool,
) -> None:
    """The most recently active session first, by its calls' own start: rows written behind
    in one statement share that statement's time, not their calls'."""
    store = UsageStore(pool)
    for sid in ("order-a", "order-b"):  # called in this order, queued together: one write
        store.record(call(sid, 1, 1))
    listed = [u.session_id for u in await store.list_usage(100)]
    assert [sid for sid in listed if sid.startswith("order-")] == ["order-b", "order-a"]


async def test_usage_counters_add_up_per_user_in_one_write(pool: Pool) -> None:
    sessions = SessionStore(pool)
    for sid, user in (("u-a1", "ann"), ("u-a2", "ann"), ("u-b1", "bob")):
        await sessions.attach(sid, user, "coder")
    limits = UserLimits(pool, LimitSettings(prices={"*": Price(1, 2)}))
    for sid in ("u-a1", "u-a2", "u-b1", "u-a1"):
        await limits.record(sid, "m", 1_000_000, 500_000)
    ann = {u.name: u.used for u in await limits.report("ann")}
    bob = {u.name: u.used for u in await limits.report("bob")}
    assert ann["tokens_per_day"] == 3 * 1_500_000 and bob["tokens_per_day"] == 1_500_000
    assert ann["cost_per_day"] == 3 * (1 + 1) and bob["cost_per_day"] == 2
