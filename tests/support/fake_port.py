"""A recording ``TurnPort`` for executor tests: what an executor asked of the loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.state.store import CallChange, SessionRow, SessionStore
from services.orchestrator.turn.ledger import Ledger, LedgerCall


@dataclass
class FakePort:
    """Implements ``TurnPort`` over a real store and ledger, recording every move."""

    store: SessionStore
    ledger: Ledger
    agents: AgentRegistry
    finish_goes_on: bool = False
    """What ``finish`` answers: True means a plan's next step started (False returned)."""
    moves: list[tuple[Any, ...]] = field(default_factory=list)

    async def session(self, sid: str) -> SessionRow:
        return await self.store.get_session(sid)

    async def template(self, sid: str, name: str) -> AgentTemplate:
        return self.agents.get(name)

    async def emit(self, sid: str, *items: Any, changes: Sequence[CallChange] = ()) -> None:
        if changes:  # the calls' changes are committed; the events are only recorded here
            await self.store.append_events([], [], [], [], changes=changes)
        self.moves.extend(("emit", sid, i.WhichOneof("event"), i) for i in items)

    async def notify(self, sid: str, event: Any) -> None:
        self.moves.append(("notify", sid, event.WhichOneof("event"), event))

    async def complete(
        self,
        call: LedgerCall,
        content: str,
        state: str = "completed",
        extra: dict[str, Any] | None = None,
    ) -> None:
        await self.ledger.set_state(call, state, result={"content": content})
        self.moves.append(("complete", call.call_id, state, content))

    async def switch(
        self,
        sid: str,
        to_agent: str,
        reason: str,
        confidence: str | None = None,
        method: str = "",
    ) -> None:
        self.moves.append(("switch", sid, to_agent, method))

    async def finish(self, sid: str, template: AgentTemplate, answer: str = "") -> bool:
        self.moves.append(("finish", sid, template.name, answer))
        return not self.finish_goes_on

    async def advance(self, sid: str) -> None:
        self.moves.append(("advance", sid))

    async def close_open_calls(self, sid: str, content: str, state: str = "cancelled") -> int:
        self.moves.append(("close_open_calls", sid, content))
        return 0

    def kinds(self) -> list[str]:
        """Each move's name, events by their type (``emit:done``)."""
        return [f"{m[0]}:{m[2]}" if m[0] in ("emit", "notify") else m[0] for m in self.moves]
