"""toolsearch over gRPC on a real Postgres + pgvector: filters, required tools, the cap,
versioning with embeddings, the per-session cache, Russian queries, llmproxy embeddings,
when the query is embedded, and the in-memory catalog rebuilt after a write."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import grpc
import pytest

from codelab.v1 import toolsearch_pb2 as pb
from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.common.channels import internal_channel
from services.common.db import Pool
from services.common.settings import Settings
from services.toolsearch import server as toolsearch
from services.toolsearch.catalog import builtin_drafts, make_draft
from services.toolsearch.config import ToolSearchConfig
from services.toolsearch.embedder import local_embedder
from services.toolsearch.indexing import Indexer
from services.toolsearch.retrieval import SearchEngine
from services.toolsearch.store import ToolStore
from tests.support.mesh import Mesh
from tests.support.runtime import until

KEY = "tool-search-test-key"
if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    Stub = pb_grpc.ToolSearchAsyncStub


@contextlib.asynccontextmanager
async def running(settings: Settings, pool: Pool, config: ToolSearchConfig) -> AsyncIterator[Stub]:
    """A toolsearch server of its own (built as the mesh builds it) and a stub on it."""
    server, port = await toolsearch.build(settings, pool, "127.0.0.1:0", config)
    await server.start()
    channel = internal_channel(f"127.0.0.1:{port}", settings.require_internal_key())
    try:
        yield cast("Stub", pb_grpc.ToolSearchStub(channel))
    finally:
        await channel.close()
        await server.stop(0.5)


@pytest.fixture
async def stub(pool: Pool) -> AsyncIterator[Stub]:
    """toolsearch alone (local embeddings) over this test's database."""
    settings = Settings(internal_api_key=KEY, metrics_port_offset=0)
    async with running(settings, pool, ToolSearchConfig()) as started:
        yield started


async def names(stub: Stub, query: str, **fields: Any) -> list[str]:
    reply = await stub.SearchTools(pb.SearchToolsRequest(query=query, **fields))
    return [r.tool.name for r in reply.results]


def tool(
    name: str, description: str, *, deprecated: bool = False, inactive: bool = False
) -> pb.ToolInput:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    return pb.ToolInput(
        name=name,
        description=description,
        parameters_json=json.dumps(schema),
        deprecated=deprecated,
        inactive=inactive,
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("прочитай файл", {"read_file"}),
        ("выполни команду в терминале", {"execute_command", "run_command"}),
        ("создай папку", {"create_directory"}),
        ("найди функцию в коде проекта", {"search_in_code", "search_in_project"}),
    ],
)
async def test_a_russian_query_finds_the_english_tool(
    stub: Stub, query: str, expected: set[str]
) -> None:
    top3 = await names(stub, query, top_k=3)
    assert expected & set(top3), top3
    # BM25 alone has no word in common with the English catalog: this is dense's job.
    assert await names(stub, query, top_k=3, mode=pb.SEARCH_MODE_LEXICAL) == []


async def test_required_tools_come_first_and_the_cap_holds(stub: Stub) -> None:
    reply = await stub.SearchTools(
        pb.SearchToolsRequest(
            query="read a file", top_k=5, required=["attempt_completion"], max_tools=3
        )
    )
    found = [(r.tool.name, r.required) for r in reply.results]
    assert len(found) == 3
    assert found[0] == ("attempt_completion", True)
    assert ("read_file", False) in found
    assert reply.results[1].lexical_score > 0


async def test_the_query_is_embedded_only_when_a_word_is_not_a_catalog_word(
    stub: Stub, pool: Pool
) -> None:
    known = await stub.SearchTools(pb.SearchToolsRequest(query="read a file", top_k=3))
    assert known.results[0].tool.name == "read_file"
    assert all(r.lexical_score > 0 and r.dense_score == 0 for r in known.results)
    # "quickly" is in no tool: the model bridges what BM25 cannot match.
    novel = await stub.SearchTools(pb.SearchToolsRequest(query="read a file quickly", top_k=3))
    assert novel.results[0].tool.name == "read_file" and novel.results[0].dense_score > 0
    settings = Settings(internal_api_key=KEY, metrics_port_offset=0)
    async with running(settings, pool, ToolSearchConfig(dense_always=True)) as always:
        every = await always.SearchTools(pb.SearchToolsRequest(query="read a file", top_k=3))
        assert every.results[0].tool.name == "read_file" and every.results[0].dense_score > 0


async def test_a_required_tool_bypasses_filters_but_unknown_ones_are_reported(stub: Stub) -> None:
    reply = await stub.SearchTools(
        pb.SearchToolsRequest(
            query="write a file",
            types=["aux"],
            required=["attempt_completion", "no_such_tool"],
            top_k=2,
        )
    )
    assert reply.results[0].tool.name == "attempt_completion"
    assert list(reply.missing_required) == ["no_such_tool"]
    assert all(r.tool.type == "aux" for r in reply.results[1:])


async def test_filters_on_type_category_risk_allow_and_deny(stub: Stub) -> None:
    system = await names(stub, "finish the task and ask the user", top_k=10, types=["system"])
    assert system and {"attempt_completion", "ask_followup_question"} <= set(system)
    files = await names(stub, "change things", top_k=10, categories=["filesystem"])
    assert set(files) <= {
        "read_file",
        "write_file",
        "list_files",
        "create_directory",
        "apply_patch",
    }
    safe = await names(stub, "run a shell command or write a file", top_k=20, max_risk="low")
    assert not {"execute_command", "run_command", "write_file"} & set(safe)
    denied = await names(stub, "read a file", top_k=5, deny=["read_file"])
    assert denied and "read_file" not in denied
    allowed = await names(stub, "file", top_k=10, allowed=["read_file", "write_file"])
    assert set(allowed) == {"read_file", "write_file"}


@pytest.mark.parametrize(
    "request_fields",
    [
        {"required": ["read_file"], "deny": ["read_file"]},
        {"required": ["read_file", "write_file"], "max_tools": 1},
        {"types": ["gadget"]},
        {"max_risk": "extreme"},
        {"top_k": 500},
    ],
)
async def test_contradictory_requests_are_invalid(
    stub: Stub, request_fields: dict[str, Any]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SearchTools(pb.SearchToolsRequest(query="file", **request_fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_versions_change_only_with_the_definition(stub: Stub, pool: Pool) -> None:
    first = await stub.UpsertTools(
        pb.UpsertToolsRequest(tools=[tool("weather_now", "Current weather for a city.")])
    )
    assert [(t.version, t.changed) for t in first.tools] == [(1, True)] and first.embedded == 1
    again = await stub.UpsertTools(
        pb.UpsertToolsRequest(tools=[tool("weather_now", "Current weather for a city.")])
    )
    assert [(t.version, t.changed) for t in again.tools] == [(1, False)]
    assert again.embedded == 0 and again.catalog_version == first.catalog_version
    changed = await stub.UpsertTools(
        pb.UpsertToolsRequest(tools=[tool("weather_now", "Exchange rate between two currencies.")])
    )
    assert [(t.version, t.changed) for t in changed.tools] == [(2, True)] and changed.embedded == 1
    assert changed.catalog_version > first.catalog_version
    rows = await pool.fetch(
        "select version, is_current, embedding::text as vector from toolsearch.tools"
        " where name = 'weather_now' order by version"
    )
    assert [(r["version"], r["is_current"]) for r in rows] == [(1, False), (2, True)]
    assert rows[0]["vector"] != rows[1]["vector"]
    # The new embedding is the one searched: the tool now means currencies.
    dense = pb.SEARCH_MODE_DENSE
    assert (await names(stub, "convert dollars to euros", top_k=1, mode=dense)) == ["weather_now"]
    listed = await stub.ListTools(pb.ListToolsRequest(names=["weather_now"]))
    assert [t.version for t in listed.tools] == [2]


async def test_deprecated_and_inactive_tools(stub: Stub) -> None:
    await stub.UpsertTools(
        pb.UpsertToolsRequest(
            tools=[
                tool("old_weather", "Weather forecast for a city.", deprecated=True),
                tool("gone_weather", "Weather report for a city.", inactive=True),
            ]
        )
    )
    assert "old_weather" not in await names(stub, "weather forecast", top_k=10)
    found = await names(stub, "weather forecast", top_k=10, include_deprecated=True)
    assert "old_weather" in found and "gone_weather" not in found
    listed = await stub.ListTools(pb.ListToolsRequest(names=["old_weather", "gone_weather"]))
    assert [t.name for t in listed.tools] == ["old_weather"]


async def test_a_listing_is_kept_until_the_catalog_version_moves(stub: Stub, pool: Pool) -> None:
    await stub.UpsertTools(pb.UpsertToolsRequest(tools=[tool("weather_now", "Weather now.")]))
    listed = await stub.ListTools(pb.ListToolsRequest())
    assert [t.name for t in listed.tools] == sorted(t.name for t in listed.tools)
    spec = next(t for t in listed.tools if t.name == "weather_now")
    assert json.loads(spec.parameters_json) == json.loads(tool("x", "x").parameters_json)
    assert (spec.version, spec.description, spec.risk, spec.active) == (
        1,
        "Weather now.",
        "low",
        True,
    )
    # A row changed without moving the catalog version: the kept answer is listed.
    await pool.execute(
        "update toolsearch.tools set description = 'Changed.' where name = 'weather_now'"
    )
    named = pb.ListToolsRequest(names=["weather_now", "read_file"])
    assert [t.name for t in (await stub.ListTools(named)).tools] == ["read_file", "weather_now"]
    assert (await stub.ListTools(named)).tools[1].description == "Weather now."
    assert await stub.ListTools(pb.ListToolsRequest()) == listed
    # Another writer moves the version (as every write does): the next listing reads again.
    await pool.fetchval(
        "with bumped as (update toolsearch.catalog_state set version = version + 1"
        " returning version) select pg_notify('toolsearch_catalog', version::text) from bumped"
    )

    async def relisted() -> bool:
        reply = await stub.ListTools(pb.ListToolsRequest())
        return "Changed." in [t.description for t in reply.tools]

    await until(relisted)
    assert (await stub.ListTools(named)).tools[1].description == "Changed."


async def test_a_repeated_search_is_served_from_the_session_cache(stub: Stub) -> None:
    request = pb.SearchToolsRequest(query="read a file", session_id="s-1", template="coder")
    first = await stub.SearchTools(request)
    second = await stub.SearchTools(request)
    assert not first.cached and second.cached
    assert [r.tool.name for r in first.results] == [r.tool.name for r in second.results]
    stats = await stub.IndexStats(pb.IndexStatsRequest())
    assert stats.cache_hits == 1 and stats.embedding_dimensions == 384
    other_session = pb.SearchToolsRequest(query="read a file", session_id="s-2", template="coder")
    assert not (await stub.SearchTools(other_session)).cached
    # Any catalog change moves the catalog version, and with it every cache key.
    await stub.UpsertTools(pb.UpsertToolsRequest(tools=[tool("weather_now", "Weather.")]))
    assert not (await stub.SearchTools(request)).cached


async def test_embeddings_from_llmproxy_replace_the_local_ones(mesh: Mesh) -> None:
    config = ToolSearchConfig(embeddings="llmproxy")
    async with running(mesh.settings, mesh.pool, config) as stub:
        stats = await stub.IndexStats(pb.IndexStatsRequest())
        assert stats.embedding_model.startswith("llmproxy/")
        models = await mesh.pool.fetch(
            "select distinct embedding_model from toolsearch.tools where is_current"
        )
        assert [r["embedding_model"] for r in models] == [stats.embedding_model]
        # Re-installing unchanged built-ins re-embedded them but made no new version.
        assert await mesh.pool.fetchval("select max(version) from toolsearch.tools") == 1
        # The scripted model hashes words, so a shared word is enough to be found.
        dense = pb.SEARCH_MODE_DENSE
        assert "calculator" in await names(stub, "arithmetic expression", top_k=3, mode=dense)


async def test_a_write_rebuilds_the_in_memory_catalog_in_the_background(pool: Pool) -> None:
    store = ToolStore(pool)
    embedder = local_embedder()
    indexer = Indexer(store, embedder)
    engine = SearchEngine(store, embedder, ToolSearchConfig())
    await indexer.upsert(builtin_drafts())
    before = await engine.snapshot()
    report = await indexer.upsert(
        [make_draft({"name": "weather_now", "description": "Current weather for a city."})]
    )
    engine.warm()
    engine.warm()  # a second write in a row only restarts the pause
    for _ in range(200):
        if engine.snapshot_held() is not before:
            break
        await asyncio.sleep(0.05)
    after = engine.snapshot_held()
    assert after is not None and after.version == report.catalog_version
    # Only the new tool was read and tokenised; every other entry is the one held before.
    fresh = [key for key in after.entries if key not in before.entries]
    assert [key[0] for key in fresh] == ["weather_now"]
    assert all(after.entries[key] is before.entries[key] for key in before.entries)
    assert after.tools[after.by_name["weather_now"]].description == "Current weather for a city."
    await engine.close()
