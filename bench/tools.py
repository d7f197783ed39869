"""Tool search: latency of ``SearchTools`` over catalogs of 1k and 10k tools, and the
speed of ``UpsertTools`` beside the embedding model's own encode rate.

The catalog is filled with synthetic tools through ``UpsertTools`` when the toolsearch
stub has that bulk RPC, else straight into ``toolsearch.tools`` (the table the service
searches). ``ListTools`` confirms the size before the searches run. Two kinds of query
are timed: keyword queries (every word is a catalog word, so BM25 answers alone) and the
same with a word no tool uses (the service embeds the query). This section runs last: the
coder is offered every catalog tool, so 10k tools would change every other turn.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
import grpc

from bench.mesh import BenchMesh
from bench.report import Figure, num, spread
from bench.upstream import split_words
from clients.python import MeshClient
from codelab.v1 import toolsearch_pb2 as pb
from services.toolsearch.catalog import dense_text, make_draft
from services.toolsearch.embedder import LocalE5Embedder

SECTION = "Tool search"
BATCH = 500
VERBS = split_words(
    "read write list search parse format deploy build test lint migrate query fetch"
)
OBJECTS = split_words(
    "file directory branch commit issue ticket table schema image container log metric "
    "secret bucket queue topic invoice customer order report dashboard notebook"
)
SYSTEMS = split_words("git jira postgres docker kubernetes s3 kafka stripe grafana slack sentry")
PARAMETERS = {"type": "object", "properties": {"target": {"type": "string"}}}
NOVEL_WORD = "urgently"
"""In no synthetic or built-in tool: a query holding it needs the embedding model."""
RAW_SAMPLE = 128
SEARCH_TARGET = "<= 10 ms p99 at 10k"


def synthetic_tools(start: int, count: int) -> list[dict[str, Any]]:
    """``count`` plausible tools (ToolSpec field names), deterministic for a given ``start``."""
    pick = random.Random(start)
    tools = []
    for i in range(start, start + count):
        verb, obj, system = pick.choice(VERBS), pick.choice(OBJECTS), pick.choice(SYSTEMS)
        tools.append(
            {
                "name": f"{system}_{verb}_{obj}_{i:05d}",
                "description": f"{verb.capitalize()} a {obj} in {system}; returns it as JSON.",
                "parameters_json": json.dumps(PARAMETERS),
                "executor": "ide",
                "tags": [system, obj],
            }
        )
    return tools


def _bulk_rpc(client: MeshClient) -> tuple[Any, Any] | None:
    """(UpsertTools, its request type) when this build of the stubs has them.

    Looked up by name so the bench runs on stubs from before and after the RPC exists.
    """
    request = getattr(pb, "UpsertToolsRequest", None)
    method = getattr(client.toolsearch, "UpsertTools", None)
    if request is None or method is None or "tools" not in request.DESCRIPTOR.fields_by_name:
        return None
    return method, request


def _bulk_request(request_type: Any, tools: Sequence[dict[str, Any]]) -> Any:
    """The request with one entry per tool, setting the fields its tool message has."""
    request = request_type()
    known = request_type.DESCRIPTOR.fields_by_name["tools"].message_type.fields_by_name
    for tool in tools:
        request.tools.add(**{k: v for k, v in tool.items() if k in known})
    return request


async def load(mesh: BenchMesh, client: MeshClient, tools: Sequence[dict[str, Any]]) -> str:
    """Add ``tools`` to the catalog; returns how ("UpsertTools" or "SQL")."""
    bulk = _bulk_rpc(client)
    how = "SQL"
    if bulk is not None:
        method, request_type = bulk
        for start in range(0, len(tools), BATCH):
            batch = _bulk_request(request_type, tools[start : start + BATCH])
            try:
                await method(batch, timeout=600)
            except grpc.aio.AioRpcError as error:
                # Stubs newer than the server answering them: only the first batch may
                # fall back to the table the older server searches.
                if start:
                    raise
                how = f"SQL (UpsertTools: {error.code().name})"
                break
        else:
            return "UpsertTools"
    conn = await asyncpg.connect(mesh.database_url)
    try:
        await conn.copy_records_to_table(
            "tools",
            schema_name="toolsearch",
            columns=["name", "version", "description", "parameters", "executor", "tags"],
            records=[
                (t["name"], 1, t["description"], t["parameters_json"], t["executor"], t["tags"])
                for t in tools
            ],
        )
    finally:
        await conn.close()
    return how


async def raw_encode_rate(mesh: BenchMesh, start: int) -> float | None:
    """Tools/s the local model embeds (the service's batches, texts and threads), measured
    in this process while the mesh is idle, just before the import it is compared with (a
    shared box's load moves); None when the mesh embeds through llmproxy."""
    if mesh.env.get("TOOLSEARCH_EMBEDDINGS", "local").strip().lower() != "local":
        return None
    # Tools past any the catalog will hold, so the sample is like them but not them.
    sample = synthetic_tools(1_000_000 + start, RAW_SAMPLE)
    texts = [dense_text(make_draft({**t, "parameters": PARAMETERS})) for t in sample]
    model = LocalE5Embedder()
    await model.embed(texts[:1])  # loads the model
    started = time.perf_counter()
    await model.embed(texts)
    return len(texts) / (time.perf_counter() - started)


def distinct_queries(count: int) -> list[str]:
    """``count`` different queries: a repeated one could be served from a result cache."""
    every = [f"{v} {o} {s}" for v in VERBS for o in OBJECTS for s in SYSTEMS]
    return random.Random(7).sample(every, min(count, len(every)))


async def _search(client: MeshClient, queries: Sequence[str]) -> tuple[list[float], int]:
    """Sequential searches: (milliseconds each, how many found anything)."""
    timings: list[float] = []
    hits = 0
    for query in queries:
        started = time.perf_counter()
        reply = await client.toolsearch.SearchTools(pb.SearchToolsRequest(query=query, top_k=5))
        timings.append((time.perf_counter() - started) * 1000)
        hits += bool(reply.results)
    return timings, hits


def _index_figure(count: int, size: int, how: str, seconds: float, raw: float | None) -> Figure:
    rate = count / seconds if seconds else float("nan")
    alone = f" · model alone {num(raw, 0)} ({rate / raw:.0%})" if raw and count else ""
    return Figure(
        SECTION,
        f"index {count:,} more tools (to {size:,}) via {how.split()[0]}",
        f"{num(rate, 0)} in {seconds:.0f} s{alone}",
        "tools/s",
        {"tools": count, "seconds": seconds, "loaded_by": how, "raw_tools_per_s": raw},
        target="the model's raw rate" if raw else "",
    )


def _search_figure(size: int, kind: str, timings: list[float], hits: int, have: int) -> Figure:
    stats = spread(timings)
    return Figure(
        SECTION,
        f"SearchTools over {size:,} tools (top_k 5), {kind}",
        f"p50 {num(stats['p50'], 2)} · p99 {num(stats['p99'], 2)}",
        "ms",
        {**stats, "catalog": have, "with_results": hits},
        target=SEARCH_TARGET if size >= 10_000 and kind.startswith("keyword") else "",
    )


async def measure(mesh: BenchMesh, sizes: Sequence[int], searches: int) -> list[Figure]:
    """For each catalog size (ascending): the model's raw rate, fill up to the size, then
    time ListTools and both kinds of search."""
    client = mesh.client()
    figures: list[Figure] = []
    queries = distinct_queries(2 * searches * len(sizes))
    try:
        have = len((await client.toolsearch.ListTools(pb.ListToolsRequest())).tools)
        added = 0
        for round_no, size in enumerate(sorted(sizes)):
            count = max(0, size - have)
            raw = await raw_encode_rate(mesh, added) if count else None
            started = time.perf_counter()
            how = await load(mesh, client, synthetic_tools(added, count))
            seconds = time.perf_counter() - started
            added += count
            figures.append(_index_figure(count, size, how, seconds, raw))
            started = time.perf_counter()
            have = len((await client.toolsearch.ListTools(pb.ListToolsRequest())).tools)
            list_ms = (time.perf_counter() - started) * 1000
            batch = queries[2 * round_no * searches : 2 * (round_no + 1) * searches]
            # The first search after an import waits for the catalog's new snapshot (built
            # once writes pause): reported on its own, the timed searches are the steady state.
            first, _ = await _search(client, [f"first after import {size}"])
            keyword = await _search(client, batch[:searches])
            novel = await _search(client, [f"{q} {NOVEL_WORD}" for q in batch[searches:]])
            figures += [
                _search_figure(size, "keyword queries", *keyword, have),
                _search_figure(size, f"with '{NOVEL_WORD}' (query embedded)", *novel, have),
                Figure(
                    SECTION,
                    f"first SearchTools after the import ({have:,} tools, new snapshot)",
                    num(first[0], 1),
                    "ms",
                    {"catalog": have},
                ),
                Figure(
                    SECTION,
                    f"ListTools of the whole catalog ({have:,} tools)",
                    num(list_ms),
                    "ms",
                    {"catalog": have},
                ),
            ]
    finally:
        await client.close()
    return figures
