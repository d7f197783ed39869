"""ToolSearch gRPC servicer: proto <-> domain, nothing else."""

from __future__ import annotations

import json
from typing import Any

from grpc import aio

from codelab.v1 import toolsearch_pb2 as pb
from codelab.v1 import toolsearch_pb2_grpc as pb_grpc
from services.toolsearch.catalog import Catalog, Tool

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolSearch"].full_name


def tool_to_proto(tool: Tool) -> pb.ToolSpec:
    return pb.ToolSpec(
        name=tool.name,
        version=tool.version,
        description=tool.description,
        parameters_json=json.dumps(tool.parameters),
        executor=tool.executor,
        tags=list(tool.tags),
        active=tool.active,
    )


class ToolSearchServicer(pb_grpc.ToolSearchServicer):
    """Lists and searches the catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    async def ListTools(
        self, request: pb.ListToolsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListToolsResponse:
        tools = await self.catalog.list_tools(list(request.names))
        return pb.ListToolsResponse(tools=[tool_to_proto(t) for t in tools])

    async def SearchTools(
        self, request: pb.SearchToolsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SearchToolsResponse:
        found = await self.catalog.search(request.query, request.top_k or 5, list(request.allowed))
        return pb.SearchToolsResponse(
            results=[pb.ScoredTool(tool=tool_to_proto(t), score=s) for t, s in found]
        )
