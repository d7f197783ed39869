"""Retrieval where it pays: with the 800-tool Seal-Tools slice in the catalog, how often a
retrieval template's offered set (``SearchTools`` with ``max_tools``, what the toolbox asks
for each step) holds every tool a dev query needs, and what share of the schema tokens of
offering every tool that set costs (the measure of ``tool_schema_tokens``).

It runs its own toolsearch on a fresh database, so the mesh's catalog is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from bench.mesh import fresh_database
from bench.report import Figure, num
from codelab.v1 import toolsearch_pb2 as pb
from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.common.channels import internal_channel
from services.common.db import Pool, create_pool
from services.common.runner import migrate
from services.common.settings import Settings
from services.orchestrator.turn.toolbox import ToolSpec, schema_tokens
from services.toolsearch import server as toolsearch
from services.toolsearch.config import ToolSearchConfig

SECTION = "Tool retrieval"
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "seal_tools"
MAX_TOOLS = (5, 8)
HIT_TARGET, SHARE_TARGET = 95.0, 15.0
KEY = "bench-retrieval-key"
# Seal-Tools writes Python type names; the catalog stores JSON schema.
JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
JSON_TYPES |= {"list": "array", "dict": "object"}


@dataclass(frozen=True)
class Query:
    """One Seal-Tools dev query and the tools that answer it."""

    id: str
    text: str
    gold: frozenset[str]
    held_out: bool
    """Not among the queries the fusion weight was tuned on (every third one was)."""


def seal_tools() -> list[pb.ToolInput]:
    tools = []
    for line in (DATA / "tool.jsonl").read_text().splitlines():
        raw: dict[str, Any] = json.loads(line)
        properties = {
            name: {**p, "type": JSON_TYPES.get(p.get("type", ""), "string")}
            for name, p in raw["parameters"].items()
        }
        schema = {"type": "object", "properties": properties, "required": raw["required"]}
        tools.append(
            pb.ToolInput(
                name=raw["api_name"],
                description=raw["api_description"],
                parameters_json=json.dumps(schema),
                type="domain",
                category=raw["field"],
            )
        )
    return tools


def seal_queries() -> list[Query]:
    queries = []
    for number, line in enumerate((DATA / "dev.jsonl").read_text().splitlines()):
        raw = json.loads(line)
        gold = frozenset(call["api"] for call in raw["calling"])
        queries.append(Query(raw["id"], raw["query"], gold, held_out=number % 3 != 0))
    return queries


@dataclass(frozen=True)
class Offered:
    """What retrieval offered for the queries at one ``max_tools``."""

    max_tools: int
    queries: int
    complete: int
    """Queries whose every needed tool was offered."""
    offered_tokens: float
    """Mean schema tokens of an offered set."""
    all_tokens: int
    """Schema tokens of offering every tool."""
    catalog: int
    """Tools in the catalog."""

    @property
    def hit_rate(self) -> float:
        return 100.0 * self.complete / self.queries

    @property
    def share(self) -> float:
        return 100.0 * self.offered_tokens / self.all_tokens


async def offered_sets(
    stub: pb_grpc.ToolSearchAsyncStub, queries: Sequence[Query], max_tools: int
) -> Offered:
    """Ask SearchTools as a retrieval template allowed every tool does, and measure the
    sets it offers against the whole catalog (the built-in tools too)."""
    catalog = await stub.ListTools(pb.ListToolsRequest())
    specs = {
        t.name: ToolSpec(t.name, t.description, json.loads(t.parameters_json), t.executor)
        for t in catalog.tools
    }
    gate = asyncio.Semaphore(4)

    async def one(query: Query) -> tuple[bool, int]:
        request = pb.SearchToolsRequest(query=query.text, top_k=max_tools, max_tools=max_tools)
        async with gate:
            reply = await stub.SearchTools(request)
        names = [r.tool.name for r in reply.results]
        return query.gold <= set(names), schema_tokens([specs[n] for n in names])

    results = await asyncio.gather(*(one(q) for q in queries))
    return Offered(
        max_tools,
        len(queries),
        sum(ok for ok, _ in results),
        sum(tokens for _, tokens in results) / len(results),
        schema_tokens(list(specs.values())),
        len(specs),
    )


@contextlib.asynccontextmanager
async def running_toolsearch(pool: Pool) -> AsyncIterator[pb_grpc.ToolSearchAsyncStub]:
    """A toolsearch server over ``pool`` (migrated) on a free port, and a stub to it."""
    settings = Settings(internal_api_key=KEY, metrics_port_offset=0)
    server, port = await toolsearch.build(settings, pool, "127.0.0.1:0", ToolSearchConfig())
    await server.start()
    channel = internal_channel(f"127.0.0.1:{port}", KEY)
    try:
        yield cast("pb_grpc.ToolSearchAsyncStub", pb_grpc.ToolSearchStub(channel))
    finally:
        await channel.close()
        await server.stop(0.5)


async def measure(server_dsn: str) -> list[Figure]:
    """Import the slice into a toolsearch of its own; one row per ``max_tools``."""
    async with fresh_database(server_dsn) as dsn:
        pool = await create_pool(dsn)
        try:
            await migrate(pool, toolsearch.MIGRATIONS)
            async with running_toolsearch(pool) as stub:
                await stub.UpsertTools(pb.UpsertToolsRequest(tools=seal_tools()))
                queries = seal_queries()
                runs = [await offered_sets(stub, queries, k) for k in MAX_TOOLS]
        finally:
            await pool.close()
    return [figure(run) for run in runs]


def figure(run: Offered) -> Figure:
    return Figure(
        SECTION,
        f"{run.queries} Seal-Tools queries over {run.catalog} tools, max_tools {run.max_tools}: "
        "every needed tool offered · schema tokens offered vs all tools",
        f"{num(run.hit_rate)} % · {num(run.share, 2)} % "
        f"({num(run.offered_tokens, 0)} of {run.all_tokens:,})",
        "% of queries · % of tokens",
        {
            "complete": run.complete,
            "queries": run.queries,
            "offered_tokens": run.offered_tokens,
            "all_tokens": run.all_tokens,
        },
        f">= {HIT_TARGET:.0f} % · <= {SHARE_TARGET:.0f} %",
    )
