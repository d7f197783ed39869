"""ToolSearch gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import json
from typing import Any

from grpc import aio

from codelab.v1 import toolsearch_pb2 as pb
from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.toolsearch.catalog import SearchFilters, Tool, ToolDraft, make_draft
from services.toolsearch.directory import MAX_ENTRIES, search_directory
from services.toolsearch.embedder import Embedder
from services.toolsearch.errors import InvalidSearch, InvalidTool
from services.toolsearch.indexing import Indexer
from services.toolsearch.listing import Listing
from services.toolsearch.retrieval import Mode, SearchEngine, SearchRequest
from services.toolsearch.store import ToolStore

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolSearch"].full_name
MODES: dict[int, Mode] = {
    pb.SEARCH_MODE_UNSPECIFIED: "hybrid",
    pb.SEARCH_MODE_LEXICAL: "lexical",
    pb.SEARCH_MODE_DENSE: "dense",
    pb.SEARCH_MODE_HYBRID: "hybrid",
}


def tool_to_proto(tool: Tool) -> pb.ToolSpec:
    return pb.ToolSpec(
        name=tool.name,
        version=tool.version,
        description=tool.description,
        parameters_json=json.dumps(tool.parameters),
        executor=tool.executor,
        tags=list(tool.tags),
        active=tool.active,
        type=tool.type,
        category=tool.category,
        long_description=tool.long_description,
        risk=tool.risk,
        deprecated=tool.deprecated,
        timeout_seconds=tool.timeout_seconds,
        remote_endpoint=tool.remote_endpoint,
    )


def draft_from_proto(item: pb.ToolInput) -> ToolDraft:
    try:
        parameters = json.loads(item.parameters_json) if item.parameters_json else None
    except json.JSONDecodeError as error:
        raise InvalidTool(f"{item.name}: parameters_json is not JSON: {error}") from error
    return make_draft(
        {
            "name": item.name,
            "description": item.description,
            "long_description": item.long_description,
            "parameters": parameters,
            "executor": item.executor,
            "type": item.type,
            "category": item.category,
            "tags": list(item.tags),
            "risk": item.risk,
            "deprecated": item.deprecated,
            "active": not item.inactive,
            "timeout_seconds": item.timeout_seconds,
            "remote_endpoint": item.remote_endpoint,
        }
    )


def request_from_proto(request: pb.SearchToolsRequest) -> SearchRequest:
    mode = MODES.get(request.mode)
    if mode is None:
        raise InvalidSearch(f"unknown search mode {request.mode}")
    return SearchRequest(
        query=request.query,
        top_k=request.top_k or 5,
        filters=SearchFilters.build(
            types=request.types,
            categories=request.categories,
            allowed=request.allowed,
            deny=request.deny,
            max_risk=request.max_risk,
            include_deprecated=request.include_deprecated,
        ),
        required=tuple(n.strip() for n in request.required if n.strip()),
        max_tools=request.max_tools,
        session_id=request.session_id,
        template=request.template,
        mode=mode,
    )


class ToolSearchServicer(pb_grpc.ToolSearchServicer):
    """Lists, searches and imports the catalog."""

    def __init__(
        self,
        store: ToolStore,
        engine: SearchEngine,
        indexer: Indexer,
        embedder: Embedder | None = None,
        lexical_weight: float = 0.8,
    ) -> None:
        self.store = store
        self.engine = engine
        self.indexer = indexer
        self.embedder = embedder
        self.lexical_weight = lexical_weight
        self.listing = Listing(store)

    async def SearchDirectory(
        self, request: pb.DirectorySearchRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DirectorySearchResponse:
        if self.embedder is None:
            raise InvalidSearch("this server has no embedder for the agent directory")
        hits = await search_directory(
            request.query,
            [(e.name, e.text) for e in request.entries],
            request.top_k or 5,
            self.embedder,
            self.lexical_weight,
        )
        return pb.DirectorySearchResponse(
            hits=[
                pb.DirectoryHit(
                    name=h.name,
                    score=h.score,
                    lexical_score=h.lexical,
                    dense_score=h.dense,
                    matched_terms=list(h.matched),
                )
                for h in hits
            ]
        )

    async def EmbedDirectory(
        self, request: pb.EmbedDirectoryRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EmbedDirectoryResponse:
        if self.embedder is None:
            raise InvalidSearch("this server has no embedder for the agent directory")
        if not 1 <= len(request.entries) <= MAX_ENTRIES:
            raise InvalidSearch(f"give 1 to {MAX_ENTRIES} directory entries")
        vectors = await self.embedder.embed([e.text for e in request.entries])
        return pb.EmbedDirectoryResponse(
            model=self.embedder.model_id,
            vectors=[
                pb.DirectoryVector(name=e.name, vector=list(v))
                for e, v in zip(request.entries, vectors, strict=True)
            ],
        )

    async def ListTools(
        self, request: pb.ListToolsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListToolsResponse:
        return await self.listing.tools(request.names)

    async def SearchTools(
        self, request: pb.SearchToolsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SearchToolsResponse:
        found = await self.engine.search(request_from_proto(request))
        return pb.SearchToolsResponse(
            results=[
                pb.ScoredTool(
                    tool=tool_to_proto(hit.tool),
                    score=hit.score,
                    lexical_score=hit.lexical_score,
                    dense_score=hit.dense_score,
                    required=hit.required,
                )
                for hit in found.hits
            ],
            cached=found.cached,
            catalog_version=found.catalog_version,
            missing_required=list(found.missing_required),
        )

    async def UpsertTools(
        self, request: pb.UpsertToolsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.UpsertToolsResponse:
        report = await self.indexer.upsert([draft_from_proto(t) for t in request.tools])
        if report.embedded or any(t.changed for t in report.tools):
            self.engine.warm()
        return pb.UpsertToolsResponse(
            tools=[
                pb.UpsertedTool(name=t.name, version=t.version, changed=t.changed)
                for t in report.tools
            ],
            catalog_version=report.catalog_version,
            embedded=report.embedded,
        )

    async def IndexStats(
        self, request: pb.IndexStatsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.IndexStatsResponse:
        snapshot = await self.engine.snapshot()
        return pb.IndexStatsResponse(
            tools=len(snapshot.tools),
            catalog_version=snapshot.version,
            embedding_model=self.engine.embedder.model_id,
            embedding_dimensions=self.engine.embedder.dimensions,
            cache_hits=self.engine.cache_hits,
            cache_misses=self.engine.cache_misses,
        )
