"""The runtime's own tools: hand-over, completion, follow-up questions, tool and agent search.

They never reach the IDE; each ends in a tool message the model reads (and, for some,
in events the IDE sees: an answer, a question).
"""

from __future__ import annotations

import json
from typing import Any

from services.orchestrator.agents.agent_instance import SCRATCH
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.peers.agent_directory import AgentDirectory
from services.orchestrator.state import events
from services.orchestrator.state.events import new_id
from services.orchestrator.turn.ledger import LedgerCall
from services.orchestrator.turn.port import TurnPort
from services.orchestrator.turn.toolbox import (
    AGENT_SEARCH,
    AGENT_TOOL_PREFIX,
    SWITCH_AGENT,
    TOOL_SEARCH,
    Toolbox,
)


class SystemTools:
    """Runs the system tools of a call the loop has validated."""

    gated = False

    def __init__(
        self,
        port: TurnPort,
        toolbox: Toolbox,
        agents: AgentRegistry,
        directory: AgentDirectory,
    ) -> None:
        self.port = port
        self.toolbox = toolbox
        self.agents = agents
        self.directory = directory

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        sid = call.session_id
        if call.tool_name == SWITCH_AGENT:
            target = arguments["agent_type"]
            await self.port.complete(
                call, f"Switched to the {target} agent, which continues the task."
            )
            await self.port.switch(sid, target, arguments.get("reason", ""), method="handoff")
            return False
        if call.tool_name == TOOL_SEARCH:
            return await self.tool_search(call, template, arguments)
        if call.tool_name == AGENT_SEARCH:
            return await self.agent_search(call, template, arguments)
        text = str(arguments.get("result") or arguments.get("question") or "")
        await self.port.emit(sid, events.assistant_content(text, template.name, new_id("msg")))
        if call.tool_name == "ask_followup_question":
            await self.port.complete(
                call,
                "The question was shown to the user; "
                "their answer follows as the next user message.",
            )
            await self.port.close_open_calls(sid, "Skipped: waiting for the user's answer.")
            await self.port.emit(sid, events.done("awaiting_user"))
            return True
        await self.port.complete(call, "Task marked complete.")
        await self.port.close_open_calls(sid, "Skipped: the task was completed.")
        return await self.port.finish(sid, template, text)

    async def tool_search(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        """Find tools for the next steps; they stay offered while this instance serves."""
        search = self.toolbox.search
        allowed = [t.name for t in await self.toolbox.offered(template)]
        found = (
            await search(
                arguments["query"],
                allowed,
                (),
                int(arguments.get("top_k", 5)),
                call.session_id,
                template.name,
            )
            if search is not None
            else []
        )
        scratch = SCRATCH.get(None)
        if scratch is not None:
            scratch.setdefault("pinned_tools", set()).update(found)
        catalog = await self.toolbox.catalog()
        listing = [
            {"name": n, "description": catalog[n].description} for n in found if n in catalog
        ]
        await self.port.complete(call, json.dumps(listing))
        return False

    async def agent_search(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        """The agent directory (seed 003 section 7.1) for an agent that delegates: the
        agents ranked for the query, and the tool that reaches each."""
        offered = {t.name for t in await self.toolbox.offered(template)}
        candidates = [t for t in self.agents.all() if t.name != template.name]
        hits = await self.directory.ranked(
            arguments["query"], int(arguments.get("top_k", 5)), candidates
        )
        listing = []
        for hit in hits:
            tool = AGENT_TOOL_PREFIX + hit.template.name
            listing.append(
                {
                    "name": hit.template.name,
                    "description": hit.template.description,
                    "score": round(hit.score, 4),
                    "tool": tool if tool in offered else None,
                }
            )
        await self.port.complete(call, json.dumps(listing))
        return False
