"""/admin/tool-sources: register, list, read and remove MCP servers whose tools join the
catalog as ``<source>.<tool>`` (the orchestrator's ToolSources). Admins only."""

from __future__ import annotations

import json
from typing import Any

import grpc
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from clients.python import MeshClient
from codelab.v1 import sources_pb2
from services.gateway.errors import ProtocolError
from services.gateway.rest import read_json


def source_json(source: sources_pb2.ToolSource) -> dict[str, Any]:
    """The definition's fields, then the connection: state, last_error, tools, times."""
    return {
        **json.loads(source.definition_json or "{}"),
        "state": source.state,
        "last_error": source.last_error,
        "tools": list(source.tools),
        "created_at": source.created_at,
        "updated_at": source.updated_at,
        "state_since": source.state_since,
    }


async def sources_health(client: MeshClient) -> dict[str, Any]:
    """``/health``'s view of the tool sources: state, since when and how many tools, per
    source (no definitions, no errors: /health needs no key). Empty when the orchestrator
    does not answer (its own status says so)."""
    try:
        reply = await client.sources.ListSources(sources_pb2.ListSourcesRequest(), timeout=2)
    except grpc.aio.AioRpcError:
        return {}
    return {
        s.name: {"state": s.state, "since": s.state_since, "tools": len(s.tools)}
        for s in reply.sources
    }


def build_sources_router(client: MeshClient, require_admin: Any) -> APIRouter:
    router = APIRouter(
        prefix="/admin/tool-sources", tags=["admin"], dependencies=[Depends(require_admin)]
    )

    @router.post("", summary="Register (or change) an MCP server as a tool source", status_code=201)
    async def register(request: Request, wait_seconds: float = 10.0) -> JSONResponse:
        """Body: ``{name, transport: stdio | streamable-http, command, args, env | url,
        headers, allowed_tools, risk, tool_risks, timeout_seconds, max_output_chars}``.
        Answers once the server listed its tools (or after ``wait_seconds``), with
        ``state`` and the catalog names of its ``tools``."""
        body = await read_json(request)
        if not isinstance(body.get("name"), str):
            raise ProtocolError("MISSING_REQUIRED_FIELD", "'name' (a string) is required")
        source = await client.sources.RegisterSource(
            sources_pb2.RegisterSourceRequest(
                definition_json=json.dumps(body), wait_seconds=wait_seconds
            )
        )
        return JSONResponse(source_json(source), status_code=201)

    @router.get("", summary="Every tool source and this replica's connection to it")
    async def list_sources() -> dict[str, Any]:
        reply = await client.sources.ListSources(sources_pb2.ListSourcesRequest())
        return {"sources": [source_json(s) for s in reply.sources]}

    @router.get("/{name}", summary="One tool source")
    async def get_source(name: str) -> dict[str, Any]:
        return source_json(await client.sources.GetSource(sources_pb2.GetSourceRequest(name=name)))

    @router.delete("/{name}", summary="Remove a source; its tools become inactive")
    async def remove_source(name: str) -> dict[str, Any]:
        reply = await client.sources.RemoveSource(sources_pb2.RemoveSourceRequest(name=name))
        return {"name": reply.name, "active": False, "deactivated_tools": reply.deactivated_tools}

    return router
