"""What the agent loop offers the executors of tool calls, and what an executor is.

An executor runs the calls of one kind of tool (the catalog's ``executor``: ``ide``,
``local``, ``system``, ``agent``, ``plan``, and the ones registered by the server). It sees
the loop only through ``TurnPort``: the few moves a tool's outcome may need (record the
result, tell the client, hand over, finish, run on), never the loop's own state. The loop
implements the port; tests give executors a fake one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.state.store import CallChange, SessionRow
from services.orchestrator.turn.ledger import LedgerCall


class TurnPort(Protocol):
    """The loop, as its executors see it."""

    async def session(self, sid: str) -> SessionRow:
        """The session's row as the loop keeps it for the message being handled."""
        ...

    async def template(self, sid: str, name: str) -> AgentTemplate:
        """The version of agent ``name`` the session's task runs on."""
        ...

    async def emit(self, sid: str, *items: Any, changes: Sequence[CallChange] = ()) -> None:
        """Send events to the session's client (a delegate's go to its parent's), in one
        commit with tool calls' ``changes`` (``Ledger.dispatching``)."""
        ...

    async def notify(self, sid: str, event: Any) -> None:
        """Send an event committed with the next ``emit``."""
        ...

    async def complete(
        self,
        call: LedgerCall,
        content: str,
        state: str = "completed",
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record a call's outcome as the tool message the model reads."""
        ...

    async def switch(
        self,
        sid: str,
        to_agent: str,
        reason: str,
        confidence: str | None = None,
        method: str = "",
    ) -> None:
        """Make ``to_agent`` the session's current agent."""
        ...

    async def finish(self, sid: str, template: AgentTemplate, answer: str = "") -> bool:
        """The agent's task is done with ``answer``. True when the session now waits;
        False when a plan's next step started (the loop runs on)."""
        ...

    async def advance(self, sid: str) -> None:
        """Run the session on until it waits for someone."""
        ...

    async def close_open_calls(self, sid: str, content: str, state: str = "cancelled") -> int:
        """Answer every open call of the session with ``content``."""
        ...


class Executor(Protocol):
    """Runs the validated calls of one kind of tool."""

    gated: bool
    """True: a call passes the human-in-the-loop policy before it runs (IDE and remote
    tools); the runtime's own tools are not gated."""

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        """Run ``call``; True when the session now waits (for the IDE, a human, a child
        session or the user), False when the loop goes on with the next step."""
        ...


class PlanHooks(Protocol):
    """What the loop asks the plan runner when a task ends or fails."""

    async def agent_finished(self, sid: str, answer: str) -> bool:
        """A plan step's agent answered; True when the next step started."""
        ...

    async def fail_running(self, sid: str, reason: str) -> None:
        """The running plan of ``sid`` failed with ``reason``."""
        ...
