"""ToolSources gRPC servicer: proto <-> the source registry only."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from grpc import aio

from codelab.v1 import sources_pb2 as pb
from codelab.v1 import sources_pb2_grpc as pb_grpc
from services.orchestrator.peers.source_registry import SourceRegistry, SourceView

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolSources"].full_name
DEFAULT_WAIT, MOST_WAIT = 10.0, 60.0


def source_to_proto(view: SourceView) -> pb.ToolSource:
    stored, status = view.stored, view.status
    return pb.ToolSource(
        name=stored.source.name,
        definition_json=json.dumps(stored.source.as_json()),
        state=status.state,
        last_error=status.error,
        tools=list(status.tools),
        created_at=stored.created_at.isoformat(),
        updated_at=stored.updated_at.isoformat(),
        state_since=datetime.fromtimestamp(status.since, UTC).isoformat(),
    )


class ToolSourcesServicer(pb_grpc.ToolSourcesServicer):
    """/admin/tool-sources, through the gateway."""

    def __init__(self, registry: SourceRegistry) -> None:
        self.registry = registry

    async def RegisterSource(
        self, request: pb.RegisterSourceRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ToolSource:
        wait = min(MOST_WAIT, max(0.0, request.wait_seconds or DEFAULT_WAIT))
        return source_to_proto(await self.registry.register(request.definition_json, wait))

    async def ListSources(
        self, request: pb.ListSourcesRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListSourcesResponse:
        return pb.ListSourcesResponse(
            sources=[source_to_proto(v) for v in await self.registry.list()]
        )

    async def GetSource(
        self, request: pb.GetSourceRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ToolSource:
        return source_to_proto(await self.registry.get(request.name))

    async def RemoveSource(
        self, request: pb.RemoveSourceRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.RemoveSourceResponse:
        deactivated = await self.registry.remove(request.name)
        return pb.RemoveSourceResponse(name=request.name, deactivated_tools=deactivated)
