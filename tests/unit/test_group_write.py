"""GroupWrite: rows that come while a write is in flight share the next one; each producer
waits for the commit of its own row, and hears of its failure."""

from __future__ import annotations

import asyncio

import pytest

from services.common.errors import DatabaseError
from services.common.group_write import GroupWrite


class Writes:
    """A write that records its rows and waits for the test's go."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.go = asyncio.Event()
        self.started = asyncio.Event()
        self.fail: set[str] = set()

    async def __call__(self, rows: list[str]) -> None:
        self.calls.append(rows)
        self.started.set()
        await self.go.wait()
        if self.fail & set(rows):
            raise DatabaseError("cannot end turn: lost", code="DB_WRITE_ERROR")


async def test_a_lone_row_is_written_at_once_and_the_rest_gather_behind_it() -> None:
    writes = Writes()
    group = GroupWrite(writes)
    first = asyncio.create_task(group.put("a"))
    await asyncio.wait_for(writes.started.wait(), 5)
    assert writes.calls == [["a"]]  # alone: no wait for company
    behind = [asyncio.create_task(group.put(r)) for r in ("b", "c", "d")]
    await asyncio.sleep(0.01)
    assert not first.done() and not any(t.done() for t in behind)  # each waits for its commit
    writes.go.set()
    await asyncio.wait_for(asyncio.gather(first, *behind), 5)
    assert writes.calls == [["a"], ["b", "c", "d"]]  # one write for what came meanwhile


async def test_a_failed_write_fails_each_of_its_rows_and_the_next_goes_on() -> None:
    writes = Writes()
    writes.fail = {"b"}
    group = GroupWrite(writes)
    first = asyncio.create_task(group.put("a"))
    await asyncio.wait_for(writes.started.wait(), 5)
    failing = [asyncio.create_task(group.put(r)) for r in ("b", "c")]
    await asyncio.sleep(0)
    writes.go.set()
    await first
    for task in failing:
        with pytest.raises(DatabaseError):
            await task
    await asyncio.wait_for(group.put("e"), 5)
    assert writes.calls == [["a"], ["b", "c"], ["e"]]


async def test_a_producer_that_leaves_does_not_take_its_row_back() -> None:
    writes = Writes()
    group = GroupWrite(writes)
    waiting = asyncio.create_task(group.put("a"))
    await asyncio.wait_for(writes.started.wait(), 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    writes.go.set()
    await asyncio.wait_for(group.put("b"), 5)
    assert writes.calls == [["a"], ["b"]]  # the write went on without its producer
