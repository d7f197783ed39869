"""One model call of a turn: the prompt fitted to the window, the answer streamed to the
client token by token, and what is kept of it (the assistant message, the proposed calls).

Nothing of the answer is sent before the turn's own writes are committed (``ready``); what
the user saw stays in the history even when the call fails or is cancelled midway. The
writes the request does not need start once it is on its way to the model: started
before, they would share the one event loop with building and sending it (see
docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from services.common.background import background
from services.common.errors import ServiceError
from services.common.model_stream import ModelFinished, ModelToolCall, ReasoningPiece, TextPiece
from services.orchestrator.agents.agent_instance import SCRATCH
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.errors import LlmFailure
from services.orchestrator.peers.early import Room
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.state import events
from services.orchestrator.state.events import new_id
from services.orchestrator.state.hub import FOLLOWED_WAIT, SessionHub
from services.orchestrator.state.store import RowChanges, SessionRow, SessionStore, StoredMessage
from services.orchestrator.turn.compaction import ContextKeeper
from services.orchestrator.turn.handover import Handover, system_prompt
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.task_limits import Budget
from services.orchestrator.turn.toolbox import Toolbox, schema_tokens


class TurnWrites:
    """Writes a model call does not need (a turn's agent switch and version pin, the call's
    tool token counts), started when its request has been sent and committed before the
    first event of its answer. ``row``: the session row changes among them, still open to
    the call's token counts until the writes start (one statement for the row)."""

    def __init__(
        self, writes: Callable[[], Coroutine[Any, Any, None]], row: RowChanges | None = None
    ) -> None:
        self._writes = writes
        self._row = row
        self._task: asyncio.Task[None] | None = None

    def count(self, offered: int, everything: int) -> bool:
        """Add a model call's tool-schema token counts to the row changes; False when
        there are none, or nothing else (the counts alone make no statement: they go with
        the turn's end), or they are already being written."""
        row = self._row
        if row is None or not row or self._task is not None or row.tool_tokens is not None:
            return False
        row.tool_tokens = (offered, everything)
        return True

    def start(self) -> None:
        """Start the writes (once; later calls do nothing)."""
        if self._task is None:
            self._task = background(self._writes())

    async def wait(self) -> None:
        """Start the writes if not yet started, and wait for them; a cancelled waiter
        does not stop them."""
        self.start()
        assert self._task is not None
        await asyncio.shield(self._task)


@dataclass(frozen=True)
class ModelCall:
    """What one model call of session ``sid`` needs; ``audience``: whose client sees it."""

    sid: str
    audience: str
    session: SessionRow
    template: AgentTemplate
    history: list[StoredMessage]
    handover: Handover
    ready: TurnWrites | None
    """The turn's first writes: no event of the answer before they are committed."""
    budget: Budget | None
    """The turn's counters: the call's tokens are added."""
    handed_again: bool = True
    """The next message naming this agent hands it the session as this call was told
    (``handover.handed_again``): an answer here is a guess of that message's request."""


class ModelStep:
    """Asks the model and records its answer; one per agent loop."""

    def __init__(
        self,
        store: SessionStore,
        ledger: Ledger,
        hub: SessionHub,
        llm: LlmClient,
        toolbox: Toolbox,
        context: ContextKeeper,
        count_later: Callable[[str, int, int], bool],
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.hub = hub
        self.llm = llm
        self.toolbox = toolbox
        self.context = context
        self.count_later = count_later
        """Takes a call's tool token counts to write with its message's end (False: the
        session has no such end here, they are written at once)."""

    async def run(self, ask: ModelCall) -> str | list[LedgerCall]:
        """Stream the answer; returns it, or the tool calls the model made (proposed in
        the ledger, in order)."""
        writes = [ask.ready] if ask.ready is not None else []
        try:
            return await self._run(ask, writes)
        except ServiceError:
            # The failure is reported after the switch it follows, as an answer would be.
            for write in writes:
                with contextlib.suppress(ServiceError):
                    await write.wait()
            raise
        finally:
            for write in writes:  # whatever happened, the switch and the counts are written
                write.start()

    async def _run(self, ask: ModelCall, writes: list[TurnWrites]) -> str | list[LedgerCall]:
        """``writes``: started once the request is sent; the call's own join them."""
        sid, audience, session, template = ask.sid, ask.audience, ask.session, ask.template
        history, ready = ask.history, ask.ready
        query = next((m.content for m in reversed(history) if m.role == "user"), "")
        pinned = SCRATCH.get({}).get("pinned_tools", ())
        everything = await self.toolbox.offered(template)
        tools = await self.toolbox.for_step(template, everything, query, sid, tuple(pinned))
        spent = template.budgets.spent(session.clarifications_used, session.searches_used)
        if spent:  # seed 003: a spent budget takes its tools out of the prompt
            tools = [t for t in tools if t.name not in spent]
        offered, offerable = schema_tokens(tools), schema_tokens(everything)
        counted: TurnWrites | None = None
        if ready is not None and ready.count(offered, offerable):
            counted = ready
        elif not self.count_later(sid, offered, offerable):
            counts = RowChanges(tool_tokens=(offered, offerable))
            counted = TurnWrites(lambda: self.store.write_changes(sid, counts, flush=True))
            writes.append(counted)

        def sent() -> None:
            for write in writes:
                write.start()

        message_id = new_id("msg")
        parts: list[str] = []
        thoughts: list[str] = []
        calls: list[ModelToolCall] = []

        def said() -> str:
            return "".join(parts)

        def answer(**extra: Any) -> StoredMessage:
            thought = "".join(thoughts) or None
            return StoredMessage(
                "assistant", said(), name=template.name, reasoning=thought, **extra
            )

        system = system_prompt(template, session, ask.handover)
        fitted = await self.context.fit(sid, audience, template, system, history, tools)
        try:
            for attempt in range(2):
                try:
                    async for output in self.llm.complete(
                        sid,
                        fitted.prompt(),
                        tools=tools,
                        temperature=template.temperature,
                        max_tokens=template.output_limit,
                        model=template.model,
                        with_reasoning=template.send_reasoning,
                        upstream_seconds=template.budgets.llm_seconds,
                        sent=sent,
                    ):
                        if ready is not None:  # nothing of the answer before the turn's writes
                            await ready.wait()
                            ready = None
                        if isinstance(output, TextPiece) and output.text:
                            parts.append(output.text)
                            self.hub.token(audience, output.text, template.name, message_id)
                        elif isinstance(output, ReasoningPiece) and output.text:
                            thoughts.append(output.text)
                            self.hub.reasoning(audience, output.text, template.name, message_id)
                        elif isinstance(output, ModelToolCall):
                            calls.append(output)
                        elif isinstance(output, ModelFinished):
                            self.context.observe(template, fitted, output.prompt_tokens)
                            if ask.budget is not None:
                                used = output.prompt_tokens + output.completion_tokens
                                ask.budget.tokens += used
                    break
                except LlmFailure as failure:
                    # The upstream counted more than the estimate: compact and ask once more.
                    overflow = failure.code == "LLM_CONTEXT_LENGTH_EXCEEDED"
                    if attempt or not overflow or parts or thoughts or calls:
                        raise
                    fitted = await self.context.fit(
                        sid, audience, template, system, history, tools, force=True
                    )
            if ready is not None:
                await ready.wait()
            if counted is not None:
                await counted.wait()
            if parts:
                final_event = events.assistant_final(template.name, message_id)
                self.hub.post(audience, final_event, within=FOLLOWED_WAIT)
                # Its client waits for the commit of the text; the statements below would
                # share the cores with it (docs/decisions.md: a whole answer's first token).
                await self.hub.streamed(audience)
        except asyncio.CancelledError:
            if parts:  # what the user saw stays in the history, even while cancelling
                await asyncio.shield(self.store.add_message(sid, answer()))
            raise
        except ServiceError:
            if parts:
                await self.store.add_message(sid, answer())
            raise
        if not calls:
            # An event after it (the turn's done, or its next step's) commits after it and
            # flushes it too.
            final = answer()  # counted once, for its row and its next prompt's room
            final = replace(final, tokens=final.token_count, reasoning_tokens=final.reasoning_count)
            await self.store.add_message(sid, final, flush=False)
            # Tools chosen per query (retrieval) leave nothing to guess the next request by,
            # nor does a system prompt the next message's hand-over will change.
            if self.llm.early and template.tool_policy.mode != "retrieval" and ask.handed_again:
                reasoning = template.send_reasoning
                alone = fitted.messages[0] if len(fitted.messages) == 1 else None
                room = Room(
                    self.context.room(template, fitted),
                    final.prompt_tokens(reasoning),
                    alone.token_count if alone is not None else 0,
                )
                self.llm.answered(sid, template.name, session.system_prompt, final, reasoning, room)
            return said()
        proposed = [(new_id("call"), c) for c in calls]
        return await self.ledger.propose(
            answer(
                tool_calls=[
                    {"id": cid, "name": c.name, "arguments": c.arguments_json}
                    for cid, c in proposed
                ]
            ),
            [
                LedgerCall(
                    call_id=cid,
                    session_id=sid,
                    agent=template.name,
                    tool_name=c.name,
                    arguments=c.arguments_json,
                    executor="",
                    state="proposed",
                )
                for cid, c in proposed
            ],
        )
