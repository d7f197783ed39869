"""The gateway's health watcher: a service is down since the first look that saw it so."""

from __future__ import annotations

import asyncio

from services.gateway.health import HealthWatch


async def test_since_is_the_first_poll_that_saw_it_and_recovery_clears_it() -> None:
    looks = iter(
        [
            {"hitl": "SERVING", "llmproxy": "SERVING"},
            {"hitl": "UNREACHABLE", "llmproxy": "SERVING"},
            {"hitl": "NOT_SERVING", "llmproxy": "UNREACHABLE"},
            {"hitl": "SERVING", "llmproxy": "UNREACHABLE"},
        ]
    )
    times = iter(["t1", "t2", "t3", "t4"])

    async def check() -> dict[str, str]:
        return next(looks)

    watch = HealthWatch(check, clock=lambda: next(times))
    seen = [dict(watch.down_since) for _ in range(4) if await watch.poll_once()]
    assert seen == [{}, {"hitl": "t2"}, {"hitl": "t2", "llmproxy": "t3"}, {"llmproxy": "t3"}]


async def test_the_watcher_polls_on_its_own_until_stopped() -> None:
    polls = 0
    three = asyncio.Event()

    async def check() -> dict[str, str]:
        nonlocal polls
        polls += 1
        if polls == 3:
            three.set()
        return {"orchestrator": "UNREACHABLE"}

    watch = HealthWatch(check, interval=0.01)
    watch.start()
    async with asyncio.timeout(5):
        await three.wait()
    await watch.stop()
    stopped_at = polls
    await asyncio.sleep(0.05)
    assert polls == stopped_at and "orchestrator" in watch.down_since
