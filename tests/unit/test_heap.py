"""A started service freezes what it built and collects its start-up garbage first."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.common.heap import THRESHOLDS, settle_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_start_up_garbage_is_collected_not_frozen() -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    settle_heap()
    assert gone() is None


def test_what_lives_is_frozen_out_of_the_collectors_passes() -> None:
    kept = Node()
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # no pass walks it again


def test_settling_again_collects_what_was_frozen_and_became_garbage() -> None:
    old = Node()  # a snapshot replaced since: frozen with the service, now unreachable
    gone = weakref.ref(old)
    settle_heap()
    del old
    gc.collect()
    assert gone() is not None  # frozen: no pass sees it
    settle_heap()
    assert gone() is None


def test_a_settled_service_keeps_young_passes_short_and_older_ones_rare() -> None:
    gc.set_threshold(700, 10, 10)  # CPython's own
    settle_heap()
    young, middle, full = gc.get_threshold()
    assert (young, middle, full) == THRESHOLDS
    assert 700 <= young <= 5_000  # a young pass is a pause on the loop: keep it small
    assert young * middle >= 1_000_000  # the middle pass: every million allocations or rarer
    assert young * middle * full >= 100_000_000
