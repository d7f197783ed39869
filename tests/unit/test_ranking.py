"""Fusion, selection and IR metrics on hand-made rankings (no database, no model), plus
the other pure parts of tool search: tokens, BM25, filters, the embedding memo, config."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from services.common.bm25 import Bm25Index, tokenize
from services.common.errors import SettingsError
from services.toolsearch.catalog import SearchFilters, Tool, split_identifier
from services.toolsearch.config import ToolSearchConfig
from services.toolsearch.embedder import MemoEmbedder, Purpose
from services.toolsearch.errors import InvalidSearch
from services.toolsearch.ranking import (
    Pick,
    mean,
    min_max,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank_fusion,
    select,
    weighted_fusion,
)


def test_rrf_sums_reciprocal_ranks_with_k_60() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "a"]])
    scores = dict(fused)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    # a and b tie exactly: the name decides, so the order is reproducible.
    assert [name for name, _ in fused] == ["a", "b", "c"]


def test_rrf_weights_and_k() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k=1, weights=[3.0, 1.0])
    assert [name for name, _ in fused] == ["a", "b"]
    assert dict(fused)["a"] == pytest.approx(3 / 2 + 1 / 3)
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


def test_min_max_maps_a_list_onto_zero_to_one() -> None:
    assert min_max([("a", 10.0), ("b", 5.0), ("c", 0.0)]) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert min_max([("only", 3.2)]) == {"only": 1.0}
    assert min_max([]) == {}


def test_weighted_fusion_mixes_normalised_scores() -> None:
    lexical = [("a", 9.0), ("b", 3.0)]
    dense = [("b", 0.9), ("c", 0.8), ("a", 0.7)]
    fused = dict(weighted_fusion(lexical, dense, lexical_weight=0.8))
    assert fused["a"] == pytest.approx(0.8 * 1.0 + 0.2 * 0.0)
    assert fused["b"] == pytest.approx(0.8 * 0.0 + 0.2 * 1.0)
    assert fused["c"] == pytest.approx(0.2 * 0.5)
    # With no lexical evidence (a Russian query, an English catalog) dense decides alone.
    only_dense = weighted_fusion([], dense, lexical_weight=0.8)
    assert [name for name, _ in only_dense] == ["b", "c", "a"]
    with pytest.raises(ValueError):
        weighted_fusion(lexical, dense, lexical_weight=1.5)


def test_select_puts_required_first_and_caps() -> None:
    ranked = [("x", 0.9), ("done", 0.5), ("y", 0.4), ("z", 0.1)]
    picks = select(ranked, required=["done", "done", "ask"], top_k=2)
    assert picks == [
        Pick("done", 0.5, True),
        Pick("ask", 0.0, True),
        Pick("x", 0.9),
        Pick("y", 0.4),
    ]
    capped = select(ranked, required=["ask"], top_k=10, max_tools=2)
    assert [p.name for p in capped] == ["ask", "x"]
    assert select([], required=[], top_k=3) == []


def test_recall_at_k() -> None:
    assert recall_at_k(["a", "b", "c"], {"a", "c"}, 1) == 0.5
    assert recall_at_k(["a", "b", "c"], {"a", "c"}, 3) == 1.0
    assert recall_at_k([], {"a"}, 5) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], set(), 5)


def test_ndcg_at_k() -> None:
    assert ndcg_at_k(["a", "b"], {"a", "b"}, 10) == pytest.approx(1.0)
    # One relevant item at rank 2 of 10: 1/log2(3) over the ideal 1/log2(2).
    assert ndcg_at_k(["x", "a"], {"a"}, 10) == pytest.approx(1 / math.log2(3))
    # Two relevant, only the second found at rank 1: 1 over (1 + 1/log2(3)).
    assert ndcg_at_k(["b", "x"], {"a", "b"}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["x", "a"], {"a"}, 1) == 0.0
    assert mean([1.0, 0.0]) == 0.5


def test_tokens_split_identifiers_and_fold_plurals() -> None:
    assert split_identifier("getHealthWorkforce") == "get Health Workforce"
    assert split_identifier("git.diff") == "git diff"
    assert tokenize("Read the Files of getUserCities") == ["read", "file", "get", "user", "city"]
    assert tokenize("прочитай файлы") == ["прочитай", "файлы"]


def test_bm25_prefers_the_rarer_and_denser_match() -> None:
    index = Bm25Index.of_texts(
        ["read a file", "write a file", "read the weather forecast for a city"]
    )
    top = index.top("read file", 3)
    assert [position for position, _ in top] == [0, 1, 2]
    assert index.top("read file", 3, eligible=np.array([False, True, True]))[0][0] == 1
    assert index.top("nothing matches", 3) == []


def _tool(
    name: str,
    *,
    type: str = "domain",
    category: str = "",
    risk: str = "low",
    deprecated: bool = False,
    active: bool = True,
) -> Tool:
    return Tool(
        name=name,
        version=1,
        description="d",
        parameters={},
        executor="ide",
        tags=(),
        type=type,
        category=category,
        risk=risk,
        deprecated=deprecated,
        active=active,
    )


def test_filters() -> None:
    shell = _tool("sh", type="aux", category="Shell", risk="high")
    bank = _tool("pay", type="domain", category="Finance/Banking", risk="medium")
    old = _tool("old", deprecated=True)
    assert SearchFilters.build(types=["aux"]).admits(shell)
    assert not SearchFilters.build(types=["domain"]).admits(shell)
    assert SearchFilters.build(categories=["finance"]).admits(bank)
    assert not SearchFilters.build(categories=["Fin"]).admits(bank)
    assert not SearchFilters.build(max_risk="medium").admits(shell)
    assert SearchFilters.build(max_risk="medium").admits(bank)
    assert not SearchFilters.build(deny=["pay"]).admits(bank)
    assert not SearchFilters.build(allowed=["sh"]).admits(bank)
    assert not SearchFilters().admits(old)
    assert SearchFilters.build(include_deprecated=True).admits(old)
    assert not SearchFilters().admits(_tool("off", active=False))
    with pytest.raises(InvalidSearch):
        SearchFilters.build(types=["gadget"])


class CountingEmbedder:
    """Two-dimensional "embeddings" that record what they were asked."""

    model_id = "counting"
    dimensions = 2

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "passage"
    ) -> list[list[float]]:
        self.asked.append(list(texts))
        return [[float(len(t)), 1.0 if purpose == "query" else 0.0] for t in texts]


async def test_the_memo_embeds_each_text_once_per_purpose() -> None:
    inner = CountingEmbedder()
    memo = MemoEmbedder(inner, size=3)
    assert await memo.embed(["ab", "abc", "ab"]) == [[2.0, 0.0], [3.0, 0.0], [2.0, 0.0]]
    assert await memo.embed(["abc"]) == [[3.0, 0.0]]
    assert await memo.embed(["abc"], purpose="query") == [[3.0, 1.0]]
    assert inner.asked == [["ab", "abc"], ["abc"]]
    await memo.embed(["x", "y"])  # evicts the least recently used ("ab")
    await memo.embed(["ab"])
    assert inner.asked[-1] == ["ab"]


def test_config_reads_its_environment_variables() -> None:
    assert ToolSearchConfig.from_env({}) == ToolSearchConfig()
    config = ToolSearchConfig.from_env(
        {"TOOLSEARCH_EMBEDDINGS": "LLMProxy", "TOOLSEARCH_LEXICAL_WEIGHT": "0.5"}
    )
    assert config.embeddings == "llmproxy" and config.lexical_weight == 0.5
    assert ToolSearchConfig.from_env({"TOOLSEARCH_DENSE_ALWAYS": "true"}).dense_always
    bad_values = ({"TOOLSEARCH_EMBEDDINGS": "openai"}, {"TOOLSEARCH_CANDIDATES": "3"})
    for bad in (*bad_values, {"TOOLSEARCH_DENSE_ALWAYS": "sometimes"}):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            ToolSearchConfig.from_env(bad)
