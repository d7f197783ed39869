"""One session's turns: send, follow the events, run tools, ask the person, until the runtime
stops waiting for this IDE (the ``done`` statuses of the README)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from clients.cli.connection import Connection
from clients.cli.errors import CliError
from clients.cli.person import Person
from clients.cli.preview import preview
from clients.cli.tools import ASK_THE_PERSON, Toolbox
from clients.cli.view import Event, View
from clients.cli.workspace import Workspace

# The runtime waits for these; anything else ends the turn (completed, cancelled, error,
# awaiting_user: the model asked a question the next message answers).
ANSWERED_HERE = frozenset({"awaiting_tool_result", "awaiting_approval", "awaiting_plan_approval"})
EXIT_CODES = {"completed": 0, "error": 1, "cancelled": 130}


def exit_code(status: str) -> int:
    """The process status for a turn that ended with ``status``."""
    return EXIT_CODES.get(status, 2)


class Driver:
    """Follows a session's turns over ``connection``."""

    def __init__(
        self,
        connection: Connection,
        toolbox: Toolbox,
        person: Person,
        view: View,
        workspace: Workspace,
    ) -> None:
        self.connection = connection
        self.toolbox = toolbox
        self.person = person
        self.view = view
        self.workspace = workspace
        self.cancelling = False
        self._open: dict[str, Event] = {}
        self._plan_request: Event | None = None
        self._steps: list[Event] = []
        self._tool_task: asyncio.Task[Any] | None = None
        self._cancel: asyncio.Future[None] | None = None

    async def say(self, text: str, *, agent_type: str | None = None) -> str:
        """Send a message and follow the turn; returns the final ``done`` status."""
        message: dict[str, Any] = {"type": "user_message", "content": text, "role": "user"}
        if agent_type:
            message["agent_type"] = agent_type
        self.cancelling = False
        await self.connection.send(message)
        return await self.follow()

    async def follow(self) -> str:
        """Handle events until a ``done`` the IDE does not answer."""
        while True:
            event = await self.connection.next_event()
            self.view.event(event)
            status = self._note(event)
            if status is None or status == "duplicate":
                continue
            if status not in ANSWERED_HERE or self.cancelling:
                self._open.clear()
                return status
            await self.answer(status)

    def _note(self, event: Event) -> str | None:
        kind = event.get("type")
        if kind == "tool_call":
            self._open[str(event["call_id"])] = event
        elif kind == "plan_approval_required":
            self._plan_request = event
        elif kind == "plan_update":
            self._steps = list(event.get("steps") or ())
        elif kind == "done":
            return str(event.get("status", "completed"))
        return None

    async def answer(self, status: str) -> None:
        """Do what the runtime waits for: run calls, or ask the person."""
        if status == "awaiting_plan_approval" and self._plan_request is not None:
            request, self._plan_request = self._plan_request, None
            decision = await self.person.review_plan(request, self._steps)
            await self.connection.send(decision.message(str(request["approval_request_id"])))
            return
        calls, self._open = list(self._open.values()), {}
        for call in calls:
            if self.cancelling:
                return
            if call.get("requires_approval"):
                await self.review(call)
            else:
                await self.run_call(call)

    async def review(self, call: Event) -> None:
        """Show a flagged call and send the person's decision."""
        decision = await self.person.review_call(call, preview(self.workspace, call))
        await self.connection.send(decision.message(str(call["call_id"])))

    async def run_call(self, call: Event) -> None:
        """Run a tool here and send its result (or its error)."""
        result: Any = None
        error: str | None = None
        tool_name = str(call["tool_name"])
        asks = tool_name in ASK_THE_PERSON  # a spinner would draw over the question
        with contextlib.nullcontext() if asks else self.view.tool_running(call):
            self._tool_task = asyncio.ensure_future(
                self.toolbox.run(tool_name, call.get("arguments") or {})
            )
            try:
                result = await self._tool_task
            except CliError as failure:
                error = failure.as_result_error()
            except asyncio.CancelledError:
                if not self.cancelling:
                    raise
                return
            finally:
                self._tool_task = None
        self.view.tool_finished(call, result, error)
        message: dict[str, Any] = {"type": "tool_result", "call_id": call["call_id"]}
        for key in ("plan_id", "step_id"):
            if call.get(key):
                message[key] = call[key]
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        await self.connection.send(message)

    def interrupt(self) -> bool:
        """Ctrl-C: the first cancels the turn (and a running tool); True means quit."""
        if self.cancelling:
            return True
        self.cancelling = True
        if self._tool_task is not None:
            self._tool_task.cancel()
        self.view.note("cancelling… (Ctrl-C again to quit)")
        self._cancel = asyncio.ensure_future(self.connection.send({"type": "cancel"}))
        return False

    async def resume(self, gateway: Any) -> str:
        """On resuming a session: answer what waited, then follow the turn it resumed
        (``idle`` when nothing waited)."""
        return await self.follow() if await self.recover(gateway) else "idle"

    async def recover(self, gateway: Any) -> bool:
        """After (re)attaching: answer what waited while no IDE was here. True if anything did."""
        session = self.connection.session_id
        acted = False
        for item in await gateway.pending_approvals(session):
            acted = True
            if item.get("type") == "plan_approval":
                decision = await self.person.review_plan(item, self._steps)
                await self.connection.send(decision.message(str(item["approval_request_id"])))
            else:
                call = {**item, "requires_approval": True}
                self.view.event({"type": "tool_call", **call})
                await self.review(call)
        for execution in await gateway.executions(session):
            if execution.get("state") != "dispatched":
                continue
            acted = True
            call = {
                "type": "tool_call",
                "call_id": execution["execution_id"],
                "tool_name": execution["tool_name"],
                "arguments": execution.get("arguments") or {},
                "plan_id": execution.get("plan_id"),
                "step_id": execution.get("step_id"),
            }
            self.view.event(call)
            await self.run_call(call)
        return acted
