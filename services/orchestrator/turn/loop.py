"""The agent loop: model -> tool calls -> IDE / human -> model, driven from persisted state.

``advance`` looks at the session's ledger: an open call is processed or waited on; with
none open the current agent's model is asked. It returns when the runtime waits for
someone (``done`` sent) or the task finished. Every step is committed before the next,
so a message arriving later (or at another process) resumes exactly where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from services.common.background import background
from services.common.errors import ServiceError
from services.orchestrator import spans
from services.orchestrator.agents.templates import ORCHESTRATOR, AgentRegistry, AgentTemplate
from services.orchestrator.peers.agent_directory import AgentDirectory
from services.orchestrator.peers.llm import (
    LlmClient,
)
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.state import events
from services.orchestrator.state.hub import FOLLOWED_WAIT, SessionHub
from services.orchestrator.state.store import (
    CallChange,
    RowChanges,
    SessionRow,
    SessionStore,
    StoredMessage,
    SwitchRow,
    TurnContext,
    TurnStart,
)
from services.orchestrator.turn.approvals import ApprovalGate, rated_risk
from services.orchestrator.turn.arguments import validate_arguments
from services.orchestrator.turn.compaction import ContextKeeper
from services.orchestrator.turn.executors.delegation import Delegation
from services.orchestrator.turn.executors.ide import IdeTools
from services.orchestrator.turn.executors.local import LocalTools
from services.orchestrator.turn.executors.plans import PlanRunner
from services.orchestrator.turn.executors.system_tools import SystemTools
from services.orchestrator.turn.families import FamilyMap
from services.orchestrator.turn.file_rules import check_paths
from services.orchestrator.turn.handover import (
    Handover,
    SessionContext,
    handed_again,
    handover_for,
    read_turn,
    session_context,
)
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.model_step import ModelCall, ModelStep, TurnWrites
from services.orchestrator.turn.port import Executor
from services.orchestrator.turn.records import call_records
from services.orchestrator.turn.task_limits import (
    Budget,
    budget_details,
    stop_answer,
    task_charge,
    turn_budget_spent,
)
from services.orchestrator.turn.toolbox import Toolbox

log = logging.getLogger(__name__)


@dataclass
class ReadAhead:
    """What a user message's first model call reads, read by its turn's first statement
    (``begin_turn``): its history and its hand-over context, each taken once by its first
    use."""

    history: list[StoredMessage] | None
    context: SessionContext | None


class Switch(NamedTuple):
    """Which agent takes a message, and why (``agent_switched``'s fields)."""

    agent: str
    reason: str
    confidence: str | None = None
    method: str = ""


@dataclass(frozen=True)
class FirstStep:
    """A turn's first model call, asked before the turn's writes are committed.

    ``history`` already ends with the user's message; ``ready`` is that message's write
    (started at once) and the agent switch's (started once the request is sent): no event
    of the answer is sent before they are committed (the first token costs the larger of
    the two, not their sum).
    """

    template: AgentTemplate
    history: list[StoredMessage]
    ready: TurnWrites


class AgentLoop:
    """Runs sessions forward; one instance per orchestrator process."""

    def __init__(
        self,
        store: SessionStore,
        ledger: Ledger,
        hub: SessionHub,
        llm: LlmClient,
        agents: AgentRegistry,
        toolbox: Toolbox,
        hitl: HitlClient,
        directory: AgentDirectory | None = None,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.hub = hub
        self.llm = llm
        self.agents = agents
        self.toolbox = toolbox
        self.hitl = hitl
        # Kept while a session's message (parents) or turn (budgets) is handled: dropped
        # with the delegates' at its end, or a long-lived process keeps one per session.
        self._budgets: FamilyMap[Budget] = FamilyMap()
        self._parents: FamilyMap[tuple[str, str] | None] = FamilyMap()
        # Session rows read at a message's start (or first use), kept while it is handled:
        # the owner is the only writer of what the loop reads from them.
        self._rows: FamilyMap[SessionRow] = FamilyMap()
        self._starts: dict[str, TurnStart] = {}
        self._counts: dict[str, tuple[int, int]] = {}
        """Tool token counts of model calls, written with their message's end."""
        # The last switch of the message being handled: (from, to, reason).
        self._switched: FamilyMap[tuple[str, str, str]] = FamilyMap()
        self._ahead: dict[str, ReadAhead] = {}
        # The status of the last `done` per session, for the session state machine.
        self._last_done: dict[str, str] = {}
        self.context = ContextKeeper(llm, store, self.post)
        self.step = ModelStep(store, ledger, hub, llm, toolbox, self.context, self.count_later)
        # The agent directory (for routing and agent_search); the server gives it toolsearch.
        self.directory = directory or AgentDirectory(agents)
        # The executors see this loop through its port (``TurnPort``) only.
        self.approvals = ApprovalGate(self, ledger, hitl)
        self.plans = PlanRunner(self, ledger, store, hitl, agents)
        self.delegation = Delegation(self, store, ledger)
        self.executors: dict[str, Executor] = {
            "ide": IdeTools(self, ledger),
            "local": LocalTools(self),
            "system": SystemTools(self, toolbox, agents, self.directory),
            "agent": self.delegation,
            "plan": self.plans,
        }

    def register(self, name: str, executor: Executor) -> None:
        """Run the calls of tools whose catalog ``executor`` is ``name`` with ``executor``."""
        self.executors[name] = executor

    background = staticmethod(background)

    async def emit(self, sid: str, *items: Any, changes: Sequence[CallChange] = ()) -> None:
        """Send events to the client of ``sid`` (a delegated child's go to its parent's),
        in one commit that also carries ``changes`` (see ``SessionHub.emit_all``)."""
        audience = await self.audience(sid)
        for item in items:
            if item.WhichOneof("event") == "done":
                self._last_done[audience] = item.done.status
        await self.hub.emit_all(audience, items, changes)

    def post(self, audience: str, event: Any, within: float | None = None) -> None:
        """Send an event to ``audience`` without waiting for its commit: the next ``emit``
        (always a ``done`` at the latest) waits for both, in order. ``within``: its commit
        may wait that long for the events that follow (see ``SessionHub.post``)."""
        self.hub.post(audience, event, within=within)

    async def notify(self, sid: str, event: Any) -> None:
        """``post`` to the client of ``sid`` (a delegate's parent's): committed with the
        next ``emit``, which always follows."""
        self.post(await self.audience(sid), event)

    async def audience(self, sid: str) -> str:
        if sid not in self._parents:
            self._parents[sid] = await self.store.parent_of(sid)
        parent = self._parents[sid]
        return parent[0] if parent else sid

    def begin(self, sid: str, start: TurnStart) -> None:
        """A message of ``sid`` is being handled; ``start`` is what its turn read (for a
        user message, what its first model call reads too)."""
        self._rows[sid] = start.session
        self._parents[sid] = start.parent
        self._starts[sid] = start
        if not start.running_plan:
            self.ledger.no_running_plan(sid)
        if start.context is not None:
            history, raw = start.context
            self._ahead[sid] = ReadAhead(history, session_context(raw))

    def count_later(self, sid: str, offered: int, everything: int) -> bool:
        """Keep a model call's tool token counts for the end of the message ``sid`` is
        handling (False when it handles none here: a delegate's calls write their own)."""
        if sid not in self._starts:
            return False
        kept = self._counts.get(sid, (0, 0))
        self._counts[sid] = (kept[0] + offered, kept[1] + everything)
        return True

    def end(self, sid: str) -> tuple[int, int]:
        """The message is handled: forget what was read for it (delegates' rows too).
        Returns the tool token counts kept for its end (``count_later``)."""
        self._starts.pop(sid, None)
        self._switched.drop_family(sid)
        self._parents.drop_family(sid)
        self._ahead.pop(sid, None)
        for key in {sid, *self._rows.drop_family(sid)}:  # the session's, and its delegates'
            self.ledger.forget(key)
        return self._counts.pop(sid, (0, 0))

    def start_of(self, sid: str) -> TurnStart | None:
        """What the message being handled read at its start (None outside one)."""
        return self._starts.get(sid)

    def take_history(self, sid: str) -> list[StoredMessage] | None:
        """The history read with the message's start, once (None when not read)."""
        ahead = self._ahead.get(sid)
        if ahead is None:
            return None
        history, ahead.history = ahead.history, None
        return history

    def new_turn(self, sid: str) -> None:
        """A user's message starts a turn: its per-turn budget starts from zero."""
        self._budgets[sid] = Budget()

    def turn_over(self, sid: str) -> None:
        """The turn of ``sid`` ended (its ``done`` says so): its budget and its delegates'
        go; the next user message starts a new one."""
        self._budgets.drop_family(sid)

    def take_last_done(self, sid: str) -> str:
        """The status of the last ``done`` sent to ``sid`` since asked ("" when none)."""
        return self._last_done.pop(sid, "")

    def update_session(self, sid: str, **changes: Any) -> None:
        """Changes this process just wrote to the session's row."""
        if sid in self._rows:
            self._rows[sid] = dataclasses.replace(self._rows[sid], **changes)

    async def session(self, sid: str) -> SessionRow:
        """The session's row: read once per message, then kept up to date here."""
        row = self._rows.get(sid)
        if row is None:
            row = self._rows[sid] = await self.store.get_session(sid)
        return row

    async def current(self, sid: str) -> AgentTemplate:
        session = await self.session(sid)
        name = session.current_agent
        served = self.agents.has(name) or name in session.agent_versions
        return await self.template(sid, name if served else self.agents.entry)

    async def template(self, sid: str, name: str) -> AgentTemplate:
        """The version of ``name`` the session's task runs on (pinned at its first use)."""
        template, pin = await self.resolve(sid, name)
        if pin is not None:
            await self.record(sid, RowChanges(pin=pin), flush=True)
        return template

    async def resolve(self, sid: str, name: str) -> tuple[AgentTemplate, tuple[str, int] | None]:
        """``template`` without writing the pin: (template, the pin to record when this is
        the agent's first use in the task). An admin's new version reaches the next task;
        the running one finishes on the version it started with."""
        session = await self.session(sid)
        version = session.agent_versions.get(name)
        if version is not None:
            return await self.agents.pinned(self.store.pool, name, version), None
        template = self.agents.get(name)
        versions = {**session.agent_versions, name: template.version}
        self._rows[sid] = dataclasses.replace(session, agent_versions=versions)
        return template, (name, template.version)

    async def switch(
        self,
        sid: str,
        to_agent: str,
        reason: str,
        confidence: str | None = None,
        method: str = "",
    ) -> None:
        """Make ``to_agent`` current: recorded, then announced."""
        switch = await self.switching(sid, Switch(to_agent, reason, confidence, method))
        if switch is not None:
            await self.record(sid, RowChanges(switch=switch), flush=False)

    async def switching(self, sid: str, to: Switch) -> SwitchRow | None:
        """``switch`` in memory now (the new agent's first prompt may be built at once);
        returns the switch for ``record`` to write and announce (None: no switch)."""
        session = await self.session(sid)
        previous = session.current_agent
        if previous == to.agent:
            return None
        self.agents.get(to.agent)
        self._switched[sid] = (previous, to.agent, to.reason)
        self._rows[sid] = dataclasses.replace(session, current_agent=to.agent)
        return SwitchRow(previous, to.agent, to.reason, to.confidence, to.method)

    def switched_by_start(self, sid: str, switch: SwitchRow) -> None:
        """The turn's first statement made ``switch`` (``begin_turn``): the session's row
        read by it holds it already; what ``switching`` keeps of a switch, kept."""
        self._switched[sid] = (switch.from_agent, switch.to_agent, switch.reason)

    async def record(
        self, sid: str, changes: RowChanges, *, flush: bool, made: SwitchRow | None = None
    ) -> None:
        """Write ``changes`` to the session's row (one statement, none when there are
        none); ``made``, a switch written already, then a switch among them, is announced
        (``agent_switched``, which commits after it and flushes it)."""
        await self.store.write_changes(sid, changes, flush=flush)
        for switch in (made, changes.switch):
            if switch is not None:
                self.post(
                    await self.audience(sid),
                    events.agent_switched(
                        switch.from_agent, switch.to_agent, switch.reason, switch.confidence
                    ),
                    within=FOLLOWED_WAIT,
                )

    async def advance(
        self, sid: str, first: FirstStep | None = None, read: TurnContext | None = None
    ) -> None:
        """Run the session until it waits for the IDE or a human, or the task ends;
        ``first``: a new turn's first model call (no call is open then); ``read``: what
        the next model call reads, read by the last write (``complete``): used when that
        call comes before anything else is done."""
        budget = self._budgets.setdefault(sid, Budget())
        proposed: list[LedgerCall] = []  # the calls the last model call made, still open
        try:
            while True:
                if first is None:
                    # What the model just proposed is open, in order: no read for it.
                    call = proposed[0] if proposed else await self.ledger.next_open(sid)
                    proposed = []
                    if call is not None or budget.stop is not None:
                        read = None  # something is done first: read again after it
                    if call is not None:
                        if call.state in ("awaiting_approval", "dispatched"):
                            return
                        if call.state in ("approved", "edited"):
                            if await self.run_approved(call):
                                return
                            continue
                        if await self.process(call, budget):
                            return
                        continue
                    if budget.stop is not None:
                        # A stop condition held: the task ends as if the agent had answered.
                        stopped, budget.stop = stop_answer(budget.stop), None
                        if await self.finish(sid, await self.current(sid), stopped):
                            return
                        continue
                template = first.template if first else await self.current(sid)
                spent = turn_budget_spent(template, budget)
                if spent is not None:
                    limit, used, most = spent
                    await self.emit(
                        sid,
                        events.error(
                            "BUDGET_EXCEEDED",
                            f"{template.name} stopped: this turn's {limit} ({most}) is spent",
                            budget_details(limit, used, most),
                        ),
                        events.done("error"),
                    )
                    return
                budget.iterations += 1
                answer = await self.model_step(sid, template, first, read)
                first, read = None, None
                if isinstance(answer, list):
                    proposed = answer
                    continue
                if await self.finish(sid, template, answer):
                    return
        except ServiceError as failure:
            await self.plans.fail_running(sid, failure.message)
            await self.emit(
                sid,
                events.error(failure.code, failure.message, failure.details),
                events.done("error"),
            )

    async def model_step(
        self,
        sid: str,
        template: AgentTemplate,
        first: FirstStep | None = None,
        read: TurnContext | None = None,
    ) -> str | list[LedgerCall]:
        """Ask the model; stream its text. Returns the answer, or the calls it proposed.
        ``read``: the history and hand-over context, read already (else read here)."""
        session = await self.session(sid)
        if first is not None:
            history, context = first.history, None
        elif read is not None:
            history, context = read[0], session_context(read[1])
        else:
            history, context = await read_turn(self.store, sid)
        handover = await self.handover(sid, template.name, context)
        return await self.step.run(
            ModelCall(
                sid,
                await self.audience(sid),
                session,
                template,
                history,
                handover,
                first.ready if first else None,
                self._budgets.get(sid),
                handed_again(handover, template.name, self.agents.multi_agent_mode),
            )
        )

    async def handover(
        self, sid: str, agent: str, context: SessionContext | None = None
    ) -> Handover:
        """What ``agent`` is told of the session it serves (from ``context``, read with the
        history, or read ahead); a switch of this message may still be on its way to
        Postgres: the one in memory is the latest."""
        if context is None:
            ahead = self._ahead.get(sid)
            if ahead is not None and ahead.context is not None:
                context, ahead.context = ahead.context, None  # the first call's, read ahead
            else:
                context = (await read_turn(self.store, sid))[1]
        handover = handover_for(context, agent)
        switched = self._switched.get(sid)
        if switched is not None and switched[1] == agent and switched[0] != agent:
            handover = dataclasses.replace(handover, previous_agent=switched[0], reason=switched[2])
        return handover

    @spans.tool_call
    async def process(self, call: LedgerCall, budget: Budget) -> bool:
        """Validate and route one proposed call; True when the session now waits."""
        sid = call.session_id
        template = await self.template(sid, call.agent)
        budget.tool_calls += 1
        if budget.tool_calls > template.max_tool_calls:
            message = f"this turn's tool call limit ({template.max_tool_calls}) is reached"
            await self.complete(call, f"Error: {message}", "failed")
            await self.close_open_calls(sid, "Skipped: the turn was stopped.")
            details = budget_details("max_tool_calls", budget.tool_calls, template.max_tool_calls)
            await self.emit(
                sid,
                events.error("BUDGET_EXCEEDED", message, details, call_id=call.call_id),
                events.done("error"),
            )
            return True
        spec = await self.toolbox.spec_for(template, call.tool_name)
        executor = self.executors.get(spec.executor) if spec is not None else None
        if spec is None or executor is None:
            return await self.refuse(
                call,
                budget,
                "TOOL_VALIDATION_ERROR",
                f"Tool {call.tool_name} is not allowed for the {template.name} agent",
            )
        raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        check = validate_arguments(call.tool_name, raw, spec.parameters)
        if not check.ok:
            return await self.refuse(call, budget, None, check.problem or "invalid arguments")
        paths = check_paths(
            call.tool_name, check.arguments, template.file_restrictions, agent_name=template.name
        )
        if not paths.ok:
            return await self.refuse(
                call,
                budget,
                paths.code or "FILE_RESTRICTION_ERROR",
                paths.message or "path refused",
            )
        arguments = paths.normalised
        if not await self.charge(sid, template, call.tool_name):
            return await self.refuse(
                call, budget, "TOOL_VALIDATION_ERROR", template.budgets.refusal(call.tool_name)
            )
        if executor.gated:
            audience = await self.audience(sid)
            cleared = await self.approvals.hold(
                call, template, arguments, audience, rated_risk(spec)
            )
            if cleared is None:
                return True  # waits for a human
            call = cleared
        return await executor.run(call, template, arguments)

    async def run_approved(self, call: LedgerCall) -> bool:
        """Run a call a human approved (or edited); True when the session now waits."""
        template = await self.template(call.session_id, call.agent)
        spec = await self.toolbox.spec_for(template, call.tool_name)
        executor = self.executors.get(spec.executor) if spec is not None else None
        return await (executor or self.executors["ide"]).run(call, template, call.arguments)

    async def charge(self, sid: str, template: AgentTemplate, tool: str) -> bool:
        """Count a clarification or a search against the task's budget; False when spent."""
        session = await self.session(sid)
        charge = task_charge(session, template, tool)
        if charge is None:
            return False
        asks, searches = charge
        if asks or searches:
            self.update_session(
                sid,
                clarifications_used=session.clarifications_used + asks,
                searches_used=session.searches_used + searches,
            )
            await self.store.spend_budget(sid, asks, searches)
        return True

    async def stop_tools(self, call: LedgerCall) -> frozenset[str]:
        """The tools whose completed call ends the task of ``call``'s agent."""
        session = await self.session(call.session_id)
        if not (self.agents.has(call.agent) or call.agent in session.agent_versions):
            return frozenset()
        return (await self.template(call.session_id, call.agent)).budgets.stop_tools

    async def complete(
        self,
        call: LedgerCall,
        content: str,
        state: str = "completed",
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record the call's outcome as the tool message the model will read (``extra``:
        more of the outcome for the runtime itself, kept beside the content)."""
        await self._outcome(call, content, state, extra, read_context=False)

    async def answered(
        self, call: LedgerCall, content: str, state: str = "completed"
    ) -> TurnContext | None:
        """``complete`` for a call the IDE answered; the same round trip reads what the next
        model call reads when no call of the session is left open (for ``advance``)."""
        return await self._outcome(call, content, state, None, read_context=True)

    async def _outcome(
        self,
        call: LedgerCall,
        content: str,
        state: str,
        extra: dict[str, Any] | None,
        *,
        read_context: bool,
    ) -> TurnContext | None:
        records = call_records(call, state)
        read = await self.ledger.complete(
            call,
            StoredMessage("tool", content, name=call.tool_name, tool_call_id=call.call_id),
            state,
            {"content": content, **(extra or {})},
            records.sources,
            records.artifacts,
            read_context=read_context,
        )
        if state == "completed" and call.tool_name in await self.stop_tools(call):
            self._budgets.setdefault(call.session_id, Budget()).stop = call.tool_name
        return read

    async def refuse(
        self,
        call: LedgerCall,
        budget: Budget,
        code: str | None,
        message: str,
    ) -> bool:
        """The call never reaches the IDE; the model is told why and may correct itself."""
        await self.complete(call, f"Error: {message}", "failed")
        if code:
            await self.emit(
                call.session_id,
                events.error(
                    code,
                    message,
                    {"tool": call.tool_name, "agent": call.agent},
                    call_id=call.call_id,
                ),
            )
        budget.invalid += 1
        template = await self.template(call.session_id, call.agent)
        if budget.invalid > template.max_invalid_arguments:
            await self.close_open_calls(call.session_id, "Skipped: the turn was stopped.")
            await self.emit(
                call.session_id,
                events.error(
                    code or "TOOL_VALIDATION_ERROR",
                    f"{template.name} stopped: too many refused tool calls",
                ),
                events.done("error"),
            )
            return True
        return False

    async def finish(self, sid: str, template: AgentTemplate, answer: str = "") -> bool:
        """The agent's task is done: a running plan goes to its next step (False: the loop
        runs on), else control returns to the orchestrator or to the delegator (True)."""
        if await self.plans.agent_finished(sid, answer):
            return False
        if await self.audience(sid) != sid:
            await self.delegation.finished(sid, answer)
            return True
        if self.agents.multi_agent_mode and template.name != ORCHESTRATOR:
            await self.switch(sid, ORCHESTRATOR, "task completed", method="completion")
        await self.emit(sid, events.done("completed"))
        return True

    async def close_open_calls(self, sid: str, content: str, state: str = "cancelled") -> int:
        """Give every open call a result so the history stays valid for the LLM API."""
        for child in await self.store.children_of(sid):
            await self.close_open_calls(child, content, state)
        calls = await self.ledger.open_calls(sid)
        for call in calls:
            await self.complete(call, content, state)
        return len(calls)
