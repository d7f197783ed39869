"""Seed 003's admin REST (section 8.2): templates, instances, tools and the agent directory.

Templates, instances and agent search go to the orchestrator's AgentAdmin; tools to
toolsearch (ListTools, UpsertTools, SearchTools). Who may call: the internal key
(``X-Internal-Auth``) always; with GATEWAY_API_KEYS set, also any key whose user is
``admin`` (``GATEWAY_API_KEYS=...,<key>:admin``). Another user's key gets 403, no
credential 401. Errors use the gateway's body ``{"type":"error", "error_code", ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from clients.python import MeshClient
from codelab.v1 import admin_pb2, toolsearch_pb2
from services.gateway import admin_bodies as bodies
from services.gateway.admin_keys import build_keys_router
from services.gateway.admin_sources import build_sources_router
from services.gateway.auth import ADMIN_USER, Authenticator
from services.gateway.errors import AdminRefused, Unauthorized
from services.gateway.keys import MeshKeyChecker
from services.gateway.render import proto_json
from services.gateway.rest import read_json


def check_admin(auth: Authenticator, headers: Mapping[str, str]) -> None:
    """Return when the caller is an admin; raise Unauthorized (401) or AdminRefused (403)."""
    if auth.is_internal(headers):
        return
    if not auth.enabled:
        raise Unauthorized("admin routes need X-Internal-Auth")
    if auth.user_for(headers) != ADMIN_USER:
        raise AdminRefused(403, "UNAUTHORIZED", "admin routes need an admin API key")


def template_json(template: admin_pb2.Template) -> dict[str, Any]:
    """name, version, active, source, created_at, served and the decoded definition."""
    return proto_json(template)


def tool_json(tool: toolsearch_pb2.ToolSpec) -> dict[str, Any]:
    return proto_json(tool)


def build_admin_router(client: MeshClient, auth: Authenticator) -> APIRouter:
    """The /admin routes; every one requires an admin (see the module docstring)."""

    def require_admin(request: Request) -> None:
        check_admin(auth, request.headers)

    router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])
    admin = client.admin

    @router.get("/templates", summary="Agent templates (newest active version of each)")
    async def list_templates(
        all_versions: str | None = None, include_inactive: str | None = None, name: str = ""
    ) -> dict[str, Any]:
        reply = await admin.ListTemplates(
            admin_pb2.ListTemplatesRequest(
                all_versions=bodies.query_flag(all_versions, "all_versions"),
                include_inactive=bodies.query_flag(include_inactive, "include_inactive"),
                name=name,
            )
        )
        return {"templates": [template_json(t) for t in reply.templates]}

    @router.get("/templates/{name}", summary="One template (newest version, or ?version=N)")
    async def get_template(name: str, version: str | None = None) -> dict[str, Any]:
        request = admin_pb2.GetTemplateRequest(name=name)
        number = bodies.query_version(version)
        if number is not None:
            request.version = number
        return template_json(await admin.GetTemplate(request))

    async def upsert(definition: str, must_exist: bool) -> JSONResponse:
        reply = await admin.UpsertTemplate(
            admin_pb2.UpsertTemplateRequest(definition_json=definition, must_exist=must_exist)
        )
        body = {**template_json(reply.template), "changed": reply.changed}
        return JSONResponse(body, status_code=201 if reply.changed else 200)

    @router.post("/templates", summary="Create a template or a new version of it")
    async def create_template(request: Request) -> JSONResponse:
        """Body: the definition (template_rules.py). 201 with the new version when it
        changed; 200 with the current version when it is identical."""
        return await upsert(bodies.template_definition(await read_json(request)), False)

    @router.put("/templates/{name}", summary="A new version of an existing template")
    async def update_template(request: Request, name: str) -> JSONResponse:
        definition = bodies.template_definition(await read_json(request), name)
        return await upsert(definition, True)

    @router.delete("/templates/{name}", summary="Deactivate every version of a template")
    async def deactivate_template(name: str) -> dict[str, Any]:
        reply = await admin.DeactivateTemplate(admin_pb2.DeactivateTemplateRequest(name=name))
        return {
            "name": reply.name,
            "active": False,
            "deactivated_versions": reply.deactivated_versions,
        }

    @router.get("/instances", summary="Agent instances of every orchestrator replica")
    async def list_instances(
        template: str = "", include_stopped: str | None = None
    ) -> dict[str, Any]:
        reply = await admin.ListInstances(
            admin_pb2.ListInstancesRequest(
                template=template,
                include_stopped=bodies.query_flag(include_stopped, "include_stopped"),
            )
        )
        return {"instances": [proto_json(i) for i in reply.instances]}

    @router.post("/agents/search", summary="Templates ranked for a request (BM25)")
    async def search_agents(request: Request) -> dict[str, Any]:
        """Body: ``{query, top_k?}`` -> ``{"results": [{name, score, ...}]}``."""
        reply = await admin.SearchAgents(bodies.agent_search(await read_json(request)))
        return {"results": [proto_json(r) for r in reply.results]}

    @router.get("/tools", summary="The active tools of the catalog")
    async def list_tools() -> dict[str, Any]:
        reply = await client.toolsearch.ListTools(toolsearch_pb2.ListToolsRequest())
        return {"tools": [tool_json(t) for t in reply.tools]}

    async def current_tool(name: str) -> toolsearch_pb2.ToolSpec:
        reply = await client.toolsearch.ListTools(toolsearch_pb2.ListToolsRequest(names=[name]))
        if not reply.tools:
            message = f"tool {name!r} is not in the catalog (or is inactive)"
            raise AdminRefused(404, "TOOL_VALIDATION_ERROR", message)
        tool: toolsearch_pb2.ToolSpec = reply.tools[0]
        return tool

    @router.get("/tools/{name}", summary="One active tool")
    async def get_tool(name: str) -> dict[str, Any]:
        return tool_json(await current_tool(name))

    @router.post("/tools", summary='Import one tool or many (`{"tools": [...]}`)')
    async def import_tools(request: Request) -> dict[str, Any]:
        """A tool gets a new version only when its definition changed."""
        reply = await client.toolsearch.UpsertTools(bodies.tool_import(await read_json(request)))
        return {
            "tools": [proto_json(t) for t in reply.tools],
            "catalog_version": reply.catalog_version,
            "embedded": reply.embedded,
        }

    @router.delete("/tools/{name}", summary="Deactivate a tool (a new, inactive version)")
    async def deactivate_tool(name: str) -> dict[str, Any]:
        tool = await current_tool(name)
        request = toolsearch_pb2.UpsertToolsRequest(tools=[bodies.deactivation(tool)])
        reply = await client.toolsearch.UpsertTools(request)
        return {"name": name, "active": False, "version": reply.tools[0].version}

    @router.post("/tools/search", summary="Tools ranked for a query, with scores")
    async def search_tools(request: Request) -> dict[str, Any]:
        """Body: ``{query, top_k?, filters?, mode?}`` -> ``{"results": [{name, score, ...}]}``."""
        reply = await client.toolsearch.SearchTools(bodies.tool_search(await read_json(request)))
        results = [
            {
                **{k: v for k, v in tool_json(hit.tool).items() if k != "parameters"},
                "score": hit.score,
                "lexical_score": hit.lexical_score,
                "dense_score": hit.dense_score,
                "required": hit.required,
            }
            for hit in reply.results
        ]
        return {
            "results": results,
            "cached": reply.cached,
            "catalog_version": reply.catalog_version,
            "missing_required": list(reply.missing_required),
        }

    return router


def install_admin(
    app: FastAPI, client: MeshClient, auth: Authenticator, keys: MeshKeyChecker
) -> None:
    """Mount /admin (and /admin/keys) on ``app``; refusals are the app's GatewayError."""

    def require_admin(request: Request) -> None:
        check_admin(auth, request.headers)

    app.include_router(build_admin_router(client, auth))
    app.include_router(build_keys_router(client, auth, keys, require_admin))
    app.include_router(build_sources_router(client, require_admin))
