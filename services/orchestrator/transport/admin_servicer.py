"""AgentAdmin gRPC servicer: proto <-> domain only.

Validation lives in template_rules, storage in template_store, ranking in toolsearch's
directory (through peers/agent_directory); after a write the registry reloads and the
instance pool follows it, so the change is served to the next lease of this replica
(others pick it up within their refresh period).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from grpc import aio

from codelab.v1 import admin_pb2 as pb
from codelab.v1 import admin_pb2_grpc as pb_grpc
from services.common.db import Pool
from services.orchestrator.agents.instances import InstancePool
from services.orchestrator.agents.template_rules import canonical, check_references
from services.orchestrator.agents.template_store import (
    InstanceRow,
    TemplateRow,
    TemplateStore,
    recorded_instances,
)
from services.orchestrator.agents.templates import PROTECTED, AgentRegistry
from services.orchestrator.errors import InvalidTemplate, MissingField, ProtectedTemplate
from services.orchestrator.peers.agent_directory import AgentDirectory
from services.orchestrator.turn.toolbox import Toolbox

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentAdmin"].full_name
MAX_TOP_K = 50


class AgentAdminServicer(pb_grpc.AgentAdminServicer):
    """Templates, instances and the agent directory for admins."""

    def __init__(
        self,
        pool: Pool,
        registry: AgentRegistry,
        toolbox: Toolbox,
        instances: InstancePool,
        directory: AgentDirectory,
    ) -> None:
        self.directory = directory
        self.pool = pool
        self.store = TemplateStore(pool)
        self.registry = registry
        self.toolbox = toolbox
        self.instances = instances

    def template_to_proto(self, row: TemplateRow) -> pb.Template:
        served = self.registry.has(row.name) and self.registry.get(row.name).version == row.version
        return pb.Template(
            name=row.name,
            version=row.version,
            active=row.active,
            source=row.source,
            created_at=row.created_at.isoformat(),
            definition_json=json.dumps(row.definition, ensure_ascii=False),
            served=served,
        )

    async def _apply(self) -> None:
        """Serve what Postgres now holds, here and in the pool."""
        await self.registry.reload(self.pool)
        await self.instances.sync()

    async def ListTemplates(
        self, request: pb.ListTemplatesRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListTemplatesResponse:
        if request.all_versions:
            rows = await self.store.versions(
                request.name, include_inactive=request.include_inactive
            )
        else:
            rows = await self.store.latest(include_inactive=request.include_inactive)
            rows = [r for r in rows if not request.name or r.name == request.name]
        return pb.ListTemplatesResponse(templates=[self.template_to_proto(r) for r in rows])

    async def GetTemplate(
        self, request: pb.GetTemplateRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.Template:
        if not request.name:
            raise MissingField("name is required")
        version = request.version if request.HasField("version") else None
        return self.template_to_proto(await self.store.get(request.name, version))

    async def UpsertTemplate(
        self, request: pb.UpsertTemplateRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.UpsertTemplateResponse:
        try:
            raw = json.loads(request.definition_json or "null")
        except json.JSONDecodeError as error:
            raise InvalidTemplate(f"definition_json is not JSON: {error}") from error
        definition = canonical(raw)
        if request.must_exist:
            await self.store.get(definition["name"])
        # A tool imported a moment ago must count: read the catalog afresh.
        await self.toolbox.refresh()
        tools = set(await self.toolbox.catalog())
        check_references(definition, tools, await self.store.active_names())
        row, changed = await self.store.write(definition, "admin")
        assert row is not None  # only installs of built-ins may write nothing
        if changed:
            await self._apply()
        return pb.UpsertTemplateResponse(template=self.template_to_proto(row), changed=changed)

    async def DeactivateTemplate(
        self, request: pb.DeactivateTemplateRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DeactivateTemplateResponse:
        if not request.name:
            raise MissingField("name is required")
        if request.name in PROTECTED:
            raise ProtectedTemplate(
                f"{request.name!r} is an entry agent and cannot be deactivated "
                f"(protected: {sorted(PROTECTED)}); upsert a new version instead",
                agent=request.name,
            )
        count = await self.store.deactivate(request.name)
        if count:
            await self._apply()
        return pb.DeactivateTemplateResponse(name=request.name, deactivated_versions=count)

    async def ListInstances(
        self, request: pb.ListInstancesRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListInstancesResponse:
        await self.instances.settled()  # this process's rows are written behind memory
        rows = await recorded_instances(
            self.pool, request.template, include_stopped=request.include_stopped
        )
        return pb.ListInstancesResponse(instances=[instance_to_proto(r) for r in rows])

    async def SearchAgents(
        self, request: pb.SearchAgentsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SearchAgentsResponse:
        if not request.query.strip():
            raise MissingField("query is required")
        top_k = request.top_k or 5
        if not 1 <= top_k <= MAX_TOP_K:
            raise MissingField(f"top_k must be from 1 to {MAX_TOP_K}, got {top_k}")
        hits = await self.directory.ranked(request.query, top_k)
        return pb.SearchAgentsResponse(
            results=[
                pb.ScoredAgent(
                    name=h.template.name,
                    version=h.template.version,
                    display_name=h.template.display_name,
                    description=h.template.description,
                    score=h.score,
                    matched_terms=list(h.matched),
                )
                for h in hits
            ]
        )


def instance_to_proto(row: InstanceRow) -> pb.Instance:
    return pb.Instance(
        instance_id=row.instance_id,
        template=row.template_name,
        template_version=row.template_version,
        state=row.state,
        session_id=row.session_id or "",
        runtime_node=row.runtime_node,
        failures=row.failures,
        last_used_at=row.last_used_at.isoformat() if row.last_used_at else "",
        created_at=row.created_at.isoformat(),
    )
