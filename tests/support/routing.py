"""A real AgentLoop over Postgres with a scripted llmproxy on a free port, driven through
``Inputs`` as the runtime drives it (routing, a user message's turn)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

from codelab.v1 import common_pb2 as pb
from codelab.v1 import hitl_pb2_grpc
from services.common.channels import internal_channel
from services.common.db import Pool
from services.orchestrator.agents.templates import (
    AgentRegistry,
    AgentTemplate,
    builtin_definitions,
)
from services.orchestrator.peers.agent_directory import AgentDirectory
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.session.inputs import Inputs
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import SessionStore
from services.orchestrator.turn.ledger import Ledger
from services.orchestrator.turn.loop import AgentLoop
from services.orchestrator.turn.toolbox import CatalogLoader, Toolbox, ToolSpec
from tests.support.llm_proxy import Reply, ScriptedProxy, finish, scripted_llm, text
from tests.support.mesh import INTERNAL_KEY

TRANSLATOR = AgentTemplate.from_definition(
    {
        "name": "translator",
        "description": "Translates user interface strings between languages",
        "multiagent_meta": {"tags": ["translation", "german", "localisation"]},
        "tool_policy": {"allowed": ["read_file"]},
    }
)


@dataclass
class Routing:
    inputs: Inputs
    proxy: ScriptedProxy
    store: SessionStore
    hub: SessionHub

    def model_says(self, verdict: str) -> None:
        self.proxy.play(Reply([text(verdict), finish()]))

    async def fallback_errors(self, sid: str) -> list[pb.ErrorEvent]:
        await self.hub.flush()
        logged = [
            pb.ServerEvent.FromString(raw) for _, raw in await self.store.events_after(sid, 0)
        ]
        return [e.error for e in logged if e.HasField("error")]


async def no_tools() -> list[ToolSpec]:
    return []


@contextlib.asynccontextmanager
async def routing_over(
    pool: Pool, multi_agent_mode: bool = True, catalog: CatalogLoader = no_tools
) -> AsyncIterator[Routing]:
    builtins = [AgentTemplate.from_definition(d) for d in builtin_definitions()]
    agents = AgentRegistry([*builtins, TRANSLATOR], multi_agent_mode)
    store, hub = SessionStore(pool), SessionHub(SessionStore(pool))
    hitl_channel = internal_channel("127.0.0.1:1", INTERNAL_KEY)  # routing never asks hitl
    hitl = HitlClient(cast("hitl_pb2_grpc.HitlAsyncStub", hitl_pb2_grpc.HitlStub(hitl_channel)))
    async with scripted_llm() as (proxy, llm):
        # BM25 here: toolsearch is not asked
        directory = AgentDirectory(agents)
        loop = AgentLoop(store, Ledger(pool), hub, llm, agents, Toolbox(catalog), hitl, directory)
        try:
            for sid in ("s1", "s2"):
                await store.attach(sid, "u1", agents.entry)
            yield Routing(Inputs(loop, loop.plans), proxy, store, hub)
        finally:
            await hub.close()
            await hitl_channel.close()


def said(content: str, agent_type: str | None = None) -> pb.UserMessage:
    message = pb.UserMessage(content=content, role="user")
    if agent_type:
        message.agent_type = agent_type
    return message
