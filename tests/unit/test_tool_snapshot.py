"""The in-memory catalog of tool search: incremental builds, exact cosine, filter masks,
the vectorised BM25's ties and its "every word known" test (no database, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.bm25 import Bm25Index, top_positions
from services.toolsearch.catalog import SearchFilters, Tool
from services.toolsearch.snapshot import build_snapshot
from services.toolsearch.store import Indexed, Key

MODEL = "m"


def _tool(name: str, description: str, *, risk: str = "low") -> Tool:
    return Tool(name, 1, description, {}, "ide", (), risk=risk)


def _row(name: str, description: str, vector: list[float] | None, **fields: str) -> Indexed:
    array = None if vector is None else np.array(vector, dtype=np.float32)
    return Indexed(_tool(name, description, **fields), array)


ROWS: dict[Key, Indexed] = {
    ("a_read", 1, MODEL): _row("a_read", "read a file", [3.0, 0.0]),
    ("b_write", 1, MODEL): _row("b_write", "write a file", [0.0, 2.0], risk="high"),
    ("c_old", 1, "other"): _row("c_old", "read the weather", [1.0, 0.0]),
    ("d_none", 1, None): _row("d_none", "read the news", None),
}


def test_a_new_version_reuses_what_it_holds_and_adds_only_fresh_rows() -> None:
    first = build_snapshot(1, MODEL, 2, list(ROWS), {}, ROWS)
    assert [t.name for t in first.tools] == ["a_read", "b_write", "c_old", "d_none"]
    changed: Key = ("b_write", 2, MODEL)
    keys = [("a_read", 1, MODEL), changed]
    fresh = {changed: _row("b_write", "delete a file", [0.0, 1.0])}
    # Held rows are never looked up in ``fresh``: a KeyError would say they were.
    second = build_snapshot(2, MODEL, 2, keys, first.entries, fresh)
    assert second.entries[keys[0]] is first.entries[keys[0]]
    assert [t.description for t in second.tools] == ["read a file", "delete a file"]
    assert second.by_name == {"a_read": 0, "b_write": 1}
    assert [p for p, _ in second.index.top("delete", 5)] == [1]


def test_dense_search_is_an_exact_cosine_over_vectors_of_the_model_only() -> None:
    snap = build_snapshot(1, MODEL, 2, list(ROWS), {}, ROWS)
    everything = np.ones(4, dtype=bool)
    # Stored vectors are normalised: length does not count, direction does.
    found = snap.dense_top([1.0, 0.1], 10, everything)
    assert [p for p, _ in found] == [0, 1]
    assert [s for _, s in found] == pytest.approx([1 / 1.01**0.5, 0.1 / 1.01**0.5])
    # Another model's vector and a missing one are never compared.
    assert list(snap.embedded) == [True, True, False, False]
    assert [p for p, _ in snap.dense_top([1.0, 0.0], 10, np.array([0, 1, 1, 1], bool))] == [1]
    assert snap.dense_top([0.0, 0.0], 10, everything) == []


def test_filter_masks_are_computed_once_per_filter_set() -> None:
    snap = build_snapshot(1, MODEL, 2, list(ROWS), {}, ROWS)
    low = SearchFilters.build(max_risk="low")
    mask = snap.eligible(low)
    assert list(mask) == [True, False, True, True]
    assert snap.eligible(SearchFilters.build(max_risk="low")) is mask
    assert list(snap.eligible(SearchFilters.build(deny=["a_read"]))) == [False, True, True, True]


def test_ties_go_to_the_lower_position_even_across_the_cut() -> None:
    scores = np.array([1.0, 2.0, 2.0, 2.0, 0.5])
    everything = np.ones(5, dtype=bool)
    assert top_positions(scores, 2, everything) == [(1, 2.0), (2, 2.0)]
    assert top_positions(scores, 10, everything)[-1] == (4, 0.5)
    assert top_positions(scores, 2, np.array([1, 0, 1, 0, 1], bool)) == [(2, 2.0), (0, 1.0)]


def test_every_word_known_means_every_token_occurs_in_the_catalog() -> None:
    index = Bm25Index.of_texts(["read a file", "list directory entries"])
    assert index.knows_every_word("Read the files")
    assert not index.knows_every_word("read a spreadsheet")
    assert not index.knows_every_word("прочитай файл")
    assert not index.knows_every_word("the of a")  # stop words only: nothing to know


def test_an_empty_catalog_finds_nothing() -> None:
    snap = build_snapshot(1, MODEL, 2, [], {}, {})
    nothing = snap.eligible(SearchFilters())
    assert snap.index.top("read a file", 5, nothing) == []
    assert snap.dense_top([1.0, 0.0], 5, nothing) == []
    assert not snap.index.knows_every_word("read")
