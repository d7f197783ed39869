"""Rows written behind their producer: a lone row at once (or after a linger that a reader
cuts short), what is queued meanwhile in the next write, a failed write logged and dropped
without stopping the queue."""

from __future__ import annotations

import asyncio
import logging

import pytest

from services.common.errors import DatabaseError
from services.common.write_behind import WriteBehind


class Sink:
    """A write that takes its time and can be told to fail."""

    def __init__(self) -> None:
        self.writes: list[list[int]] = []
        self.fail_next = False
        self.gate = asyncio.Event()
        self.gate.set()
        self.wrote = asyncio.Event()

    async def __call__(self, rows: list[int]) -> None:
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise DatabaseError("Postgres is away", code="DB_WRITE_ERROR")
        self.writes.append(rows)
        self.wrote.set()


async def test_a_lone_row_is_written_at_once() -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=0)
    queue.put(1)
    await queue.settled()
    assert sink.writes == [[1]]


async def test_rows_queued_while_a_write_runs_go_together_in_the_next() -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=0)
    sink.gate.clear()
    queue.put(1)
    await asyncio.sleep(0)  # the writer took 1 and waits on the slow write
    for n in (2, 3, 4):
        queue.put(n)
    sink.gate.set()
    await queue.settled()
    assert sink.writes == [[1], [2, 3, 4]]


async def test_a_failed_write_is_logged_and_the_queue_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=0)
    sink.fail_next = True
    with caplog.at_level(logging.WARNING):
        queue.put(1)
        await queue.settled()
    assert "numbers not written: Postgres is away" in caplog.text
    queue.put(2)
    await queue.settled()
    assert sink.writes == [[2]]


async def test_settled_with_nothing_queued_returns() -> None:
    queue: WriteBehind[int] = WriteBehind(Sink(), "numbers", linger=0)
    await asyncio.wait_for(queue.settled(), 1)


async def test_with_a_linger_the_rows_of_a_moment_go_together() -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=10.0)
    queue.put(1)
    for _ in range(3):
        await asyncio.sleep(0)  # without a linger the writer would have taken 1 alone
    queue.put(2)
    assert sink.writes == []
    await asyncio.wait_for(queue.settled(), 1)  # a reader does not wait out the linger
    assert sink.writes == [[1, 2]]


async def test_a_linger_ends_on_its_own() -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=0.01)
    queue.put(1)
    await asyncio.wait_for(sink.wrote.wait(), 5)  # nobody asked for it: the linger ran out
    assert sink.writes == [[1]]


async def test_a_reader_during_a_write_leaves_the_next_linger_alone() -> None:
    sink = Sink()
    queue: WriteBehind[int] = WriteBehind(sink, "numbers", linger=10.0)
    sink.gate.clear()
    queue.put(1)
    first = asyncio.create_task(queue.settled())  # cuts the linger: 1 is being written
    await asyncio.sleep(0)
    second = asyncio.create_task(queue.settled())  # asks again while the write runs
    await asyncio.sleep(0)
    sink.gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    queue.put(2)
    for _ in range(3):
        await asyncio.sleep(0)
    assert sink.writes == [[1]]  # the new writer lingers
    await asyncio.wait_for(queue.settled(), 1)
    assert sink.writes == [[1], [2]]
