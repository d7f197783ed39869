"""What each IDE message does to a session: routing, tool results, decisions, cancel.

Every handler ends with the runtime waiting (a ``done`` event), directly or through
the agent loop, so an SSE client always sees its stream close.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable

from codelab.v1 import common_pb2 as pb
from services.common.errors import ServiceError
from services.common.model_stream import TextPiece
from services.orchestrator import spans
from services.orchestrator.agents.routing import (
    SPECIALISTS,
    Classification,
    classification_prompt,
    keyword_classification,
    parse_classification,
)
from services.orchestrator.agents.templates import ORCHESTRATOR, PROTECTED
from services.orchestrator.errors import MeshCallFailed
from services.orchestrator.peers.agent_directory import AgentHit
from services.orchestrator.peers.mesh_clients import Expired
from services.orchestrator.session.tool_timeouts import TimedOut
from services.orchestrator.state import events
from services.orchestrator.state.store import AgentAhead, RowChanges, StoredMessage
from services.orchestrator.turn.arguments import validate_arguments
from services.orchestrator.turn.executors.plans import PlanRunner
from services.orchestrator.turn.file_rules import check_paths
from services.orchestrator.turn.handover import NAMED
from services.orchestrator.turn.ledger import LedgerCall
from services.orchestrator.turn.loop import AgentLoop, FirstStep, Switch
from services.orchestrator.turn.model_step import TurnWrites
from services.orchestrator.turn.patch_review import REVIEW_TOOL, review_outcome

log = logging.getLogger(__name__)


async def _all(*writes: Awaitable[None] | None) -> None:
    """Wait for writes started side by side; the first failure is raised. A lone write is
    awaited as it is (it starts at once, not one task later)."""
    started = [w for w in writes if w is not None]
    if len(started) == 1:
        await started[0]
        return
    await asyncio.gather(*started)


CLASSIFY_SECONDS = 20.0
DIRECTORY_ROUTES = 3
FINISHED = ("completed", "failed")
TIMED_OUT = "timed_out"
CLOSED = ("cancelled", "expired", "rejected")
# A decision as seed 004's HITL status of the call.
STATUS_OF_DECISION = {"approve": "approved", "edit": "edited_by_human", "reject": "rejected"}


def history_entry(message: pb.UserMessage) -> StoredMessage | None:
    """How a user message is stored in the history (None: it has no content)."""
    if not message.content.strip():
        return None
    return StoredMessage("user", message.content)


class Inputs:
    """Applies client messages to sessions through the agent loop."""

    def __init__(self, loop: AgentLoop, plans: PlanRunner) -> None:
        self.loop = loop
        self.plans = plans

    async def fail(self, sid: str, code: str, message: str, call_id: str | None = None) -> None:
        await self.loop.emit(
            sid, events.error(code, message, call_id=call_id), events.done("error")
        )

    async def classify(self, sid: str, content: str) -> Classification:
        """The LLM's choice (JSON, temperature 0.3); keywords when it fails or talks nonsense."""
        allowed = [a for a in SPECIALISTS if self.loop.agents.has(a)]
        extra = await self.directory_routes(content)
        allowed += [hit.template.name for hit in extra]
        listed = [(hit.template.name, hit.template.description) for hit in extra]
        request = [StoredMessage("user", classification_prompt(content, listed))]
        try:
            async with asyncio.timeout(CLASSIFY_SECONDS):
                text = "".join(
                    [
                        piece.text
                        async for piece in self.loop.llm.complete(
                            sid, request, purpose="classification", temperature=0.3, max_tokens=200
                        )
                        if isinstance(piece, TextPiece)
                    ]
                )
            parsed = parse_classification(text, allowed)
        except (TimeoutError, ServiceError) as error:
            log.warning("routing by keywords", extra={"fields": {"err": str(error)}})
            parsed, cause = None, str(error) or type(error).__name__
        else:
            cause = "the model's answer named no agent"
        if parsed is not None:
            return parsed
        # Not fatal: the turn goes on, routed by keywords; the client hears why.
        self.loop.post(
            await self.loop.audience(sid),
            events.error(
                "CLASSIFICATION_FAILED",
                f"task classification failed ({cause}); routed by keywords",
                {"fallback": "keywords"},
            ),
        )
        keywords = keyword_classification(content)
        found = next((hit for hit in extra if hit.matched), None)
        if keywords.confidence == "low" and found is not None:
            # No routing keyword, but an admin's template says it does this.
            reason = "agent directory: " + ", ".join(found.matched)
            return Classification(found.template.name, "medium", reason, "directory")
        return keywords

    async def directory_routes(self, content: str) -> list[AgentHit]:
        """Served templates beyond the six, ranked by the agent directory for ``content``
        (the classification may pick them)."""
        agents = self.loop.agents
        extra = [t for t in agents.all() if t.name not in {*SPECIALISTS, *PROTECTED}]
        return await self.loop.directory.ranked(content, DIRECTORY_ROUTES, extra) if extra else []

    async def user_message(
        self, sid: str, message: pb.UserMessage, applies: tuple[str, int] | None = None
    ) -> None:
        """Start a turn; ``applies``: the client message id (and first seq) it carries out,
        marked started when the message is stored."""
        loop = self.loop
        user = history_entry(message)
        if user is None:
            await self.fail(sid, "MISSING_REQUIRED_FIELD", "user_message needs content")
            return
        start = loop.start_of(sid)
        history = loop.take_history(sid)
        if start is None or start.open_calls:
            # A new message while calls wait: they will never run; close them so the
            # history stays valid (every tool call answered) before the user speaks.
            await loop.close_open_calls(sid, "Cancelled: the user sent a new message instead.")
            history = None  # read before those answers were written
        if start is None or start.running_plan:
            await self.plans.cancel_running(sid)
        stored = None
        if start is None or not start.stored:
            # Written at once (the message is claimed: a process dying before it is stored
            # would lose it); its turn's first event commits after it (``ready``) and
            # flushes it too. The history was read by the turn's start, so it does not hold
            # the message twice. (With nothing open, the turn's start stored it already.)
            stored = loop.background(
                loop.store.add_message(sid, user, flush=False, applies=applies)
            )
        # The switch, the pin and the first call's tool counts: one write of the session's
        # row, started once the first model request is sent (the first event flushes it),
        # or as soon as it is known when that request left early (peers/early.py). None
        # when the message names its agent and the turn's start stored it: that statement
        # switched and pinned (``made``: announced here), and the counts go with the turn's
        # end, so no statement stands between the turn and its first event.
        row = RowChanges()
        made = start.switched if start is not None else None
        ready = TurnWrites(lambda: _all(stored, loop.record(sid, row, flush=False, made=made)), row)
        try:
            loop.new_turn(sid)
            if made is not None:
                loop.switched_by_start(sid, made)
            to = await self.route(sid, message)
            # An unknown agent_type fails here, before any call.
            template, row.pin = await loop.resolve(sid, to.agent)
            row.switch = await loop.switching(sid, to)
            if loop.llm.has_early(sid):  # its request is on its way: the writes go now
                ready.start()
                await asyncio.sleep(0)  # (sent before the turn goes on without a pause)
            if history is not None:
                await loop.advance(sid, FirstStep(template, [*history, user], ready))
                return
            await ready.wait()
        finally:
            ready.start()  # the switch is recorded however the turn went
        await loop.advance(sid)

    def named(self, message: pb.UserMessage) -> Switch | None:
        """The agent a new message goes to whatever the session holds: single-agent mode's
        entry, or the agent the message names (None: the session's agent or routing)."""
        agents = self.loop.agents
        if not agents.multi_agent_mode:
            return Switch(agents.entry, "single-agent mode", None, "mode")
        if message.HasField("agent_type") and message.agent_type:
            return Switch(message.agent_type, NAMED, None, "explicit")
        return None

    def ahead(self, message: pb.UserMessage) -> AgentAhead | None:
        """``named`` for ``begin_turn`` to switch to and pin (an agent served here only: an
        unknown one fails at routing, before anything is written)."""
        to = self.named(message)
        agents = self.loop.agents
        if to is None or not agents.has(to.agent):
            return None
        version = agents.get(to.agent).version
        return AgentAhead(to.agent, version, to.reason, to.confidence, to.method)

    async def route(self, sid: str, message: pb.UserMessage) -> Switch:
        """Which agent takes a new message, and why."""
        loop = self.loop
        named = self.named(message)
        if named is not None:
            return named
        current = (await loop.session(sid)).current_agent
        if current == ORCHESTRATOR or not loop.agents.has(current):
            choice = await self.classify(sid, message.content)
            reason = choice.reason or f"routed by {choice.method}"
            return Switch(choice.agent, reason, choice.confidence, choice.method)
        return Switch(current, "")

    async def switch_agent(self, sid: str, message: pb.SwitchAgent) -> None:
        if not self.loop.agents.has(message.agent_type):
            await self.fail(
                sid, "AGENT_NOT_FOUND", f"agent {message.agent_type!r} is not available"
            )
            return
        reason = message.reason if message.HasField("reason") else "User requested"
        await self.loop.switch(sid, message.agent_type, reason, method="explicit")
        if message.content.strip():
            await self.loop.close_open_calls(sid, "Cancelled: the user switched agents.")
            await self.loop.store.add_message(sid, StoredMessage("user", message.content))
            self.loop.new_turn(sid)
            await self.loop.advance(sid)
        else:
            await self.loop.emit(sid, events.done("completed"))

    async def tool_result(self, sid: str, result: pb.ToolResult, user_id: str = "") -> None:
        start = self.loop.start_of(sid)
        if start is not None and start.call_id == result.call_id:  # read by the turn's start
            call = None if start.call is None else LedgerCall(**start.call)
        else:
            call = await self.loop.ledger.find(sid, result.call_id)
        if call is None:
            await self.fail(
                sid, "TOOL_CALL_NOT_FOUND", f"no tool call {result.call_id}", result.call_id
            )
            return
        if call.state in FINISHED:
            await self.loop.emit(sid, events.done("duplicate"))
            return
        if call.state == TIMED_OUT:
            await self.fail(
                sid,
                "TOOL_TIMEOUT",
                f"tool call {call.call_id} timed out; its result is ignored",
                call.call_id,
            )
            return
        if call.state in CLOSED:
            await self.fail(
                sid,
                "HITL_TIMEOUT" if call.state == "expired" else "CANCELLED",
                f"tool call {call.call_id} was {call.state}; its result is ignored",
                call.call_id,
            )
            return
        if call.state != "dispatched":
            await self.fail(
                sid,
                "TOOL_VALIDATION_ERROR",
                f"tool call {call.call_id} is {call.state}, not dispatched",
                call.call_id,
            )
            return
        read = None  # the history the model reads next, read by the result's own commit
        if call.tool_name == REVIEW_TOOL:
            await self.reviewed(call, result, user_id)
        elif result.HasField("error") and result.error:
            error = f"Error from the IDE: {result.error}"
            read = await self.loop.answered(call, error, "failed")
        else:
            content = result.result_json if result.HasField("result_json") else "null"
            read = await self.loop.answered(call, content)
        await self.loop.advance(call.session_id, read=read)  # a delegate's call: the child's

    async def reviewed(self, call: LedgerCall, result: pb.ToolResult, user_id: str) -> None:
        """The IDE's patch review came back: it is the person's decision on the patch."""
        proposed = call.arguments.get("patch", "") if isinstance(call.arguments, dict) else ""
        review = review_outcome(
            proposed,
            result.result_json if result.HasField("result_json") else None,
            result.error if result.HasField("error") else None,
        )
        await self.loop.hitl.audit(
            call.session_id,
            "patch_review",
            review.decision,
            user_id,
            call.call_id,
            feedback=review.feedback,
            tool_name=call.tool_name,
            original={"patch": proposed},
            modified={"patch": review.patch} if review.decision == "edit" else None,
        )
        status = STATUS_OF_DECISION[review.decision]
        await self.loop.notify(
            call.session_id,
            events.call_status(call.call_id, status, call.tool_name, feedback=review.feedback),
        )
        if review.patch is None:
            note = f" Feedback: {review.feedback}" if review.feedback else ""
            await self.loop.complete(call, "The user rejected the whole patch." + note)
            return
        content = json.dumps({"decision": review.decision, "patch": review.patch})
        await self.loop.complete(call, content, extra={"reviewed_patch": review.patch})

    @spans.approval_decision
    async def hitl_decision(self, sid: str, user_id: str, decision: pb.HitlDecision) -> None:
        loop = self.loop
        call = await loop.ledger.find(sid, decision.call_id)
        if call is None or call.tool_name == "create_plan":
            await self.fail(
                sid,
                "PENDING_APPROVAL_NOT_FOUND",
                f"no pending approval for call {decision.call_id}",
                decision.call_id,
            )
            return
        modified = None
        if decision.decision == pb.DECISION_EDIT and decision.HasField("modified_arguments_json"):
            try:
                modified = json.loads(decision.modified_arguments_json)
            except ValueError as error:
                modified = None
                problem: tuple[str, str] | None = (
                    "INVALID_DECISION",
                    f"modified_arguments_json is not JSON: {error}",
                )
            else:
                problem = await self.edited_problem(call, modified)
            if problem is not None:
                await loop.emit(
                    sid,
                    events.error(problem[0], problem[1], call_id=call.call_id),
                    events.done("awaiting_approval"),
                )
                return
        feedback = decision.feedback if decision.HasField("feedback") else None
        try:
            decided = await loop.hitl.decide(
                sid, call.call_id, decision.decision, modified, feedback, user_id
            )
        except MeshCallFailed as failure:
            if failure.code == "HITL_TIMEOUT" and call.state == "awaiting_approval":
                # hitl expired it before this runtime heard: the same as the expiry itself.
                await self.expired(Expired(call.call_id, call.session_id, 0))
                return
            await self.fail(sid, failure.code, failure.message, call.call_id)
            return
        if call.state != "awaiting_approval":  # a retried decision: hitl applied it once
            await loop.emit(sid, events.done("duplicate"))
            return
        status = STATUS_OF_DECISION[decided.decision]
        await loop.notify(
            sid,
            events.call_status(
                call.call_id,
                status,
                call.tool_name,
                plan_id=call.plan_id,
                step_id=call.step_id,
                feedback=decided.feedback,
            ),
        )
        if decided.decision == "reject":
            note = f" Feedback: {decided.feedback}" if decided.feedback else ""
            await loop.complete(
                call, "The user rejected this tool call; it was not run." + note, "rejected"
            )
            await loop.advance(call.session_id)
            return
        state = "edited" if decided.decision == "edit" else "approved"
        await loop.ledger.set_state(call, state, arguments=decided.arguments)
        reason = "approved by the user" if state == "approved" else "edited by the user"
        cleared = dataclasses.replace(call, arguments=decided.arguments, reason=reason)
        if not await loop.run_approved(cleared):
            await loop.advance(call.session_id)  # it ran in the runtime: the loop goes on

    async def edited_problem(
        self, call: LedgerCall, arguments: dict[str, object]
    ) -> tuple[str, str] | None:
        """Edited arguments pass the same schema and file rules as the model's."""
        template = await self.loop.template(call.session_id, call.agent)
        spec = await self.loop.toolbox.spec_for(template, call.tool_name)
        if spec is None:
            return "TOOL_VALIDATION_ERROR", f"{call.tool_name} is not allowed"
        check = validate_arguments(call.tool_name, json.dumps(arguments), spec.parameters)
        if not check.ok:
            return "INVALID_DECISION", check.problem or "invalid edited arguments"
        paths = check_paths(
            call.tool_name, check.arguments, template.file_restrictions, agent_name=template.name
        )
        if not paths.ok:
            return paths.code or "FILE_RESTRICTION_ERROR", paths.message or "path refused"
        return None

    async def cancelled(self, sid: str) -> None:
        """After a cancel: answer every open call and stop any plan."""
        await self.loop.close_open_calls(sid, "Cancelled by the user.")
        await self.plans.cancel_running(sid)
        await self.loop.emit(sid, events.done("cancelled"))

    async def timed_out(self, item: TimedOut) -> None:
        """No tool_result in time: the model reads a synthetic result and goes on."""
        call = await self.loop.ledger.get(item.session_id, item.call_id)
        if call is None or call.state != "dispatched":
            return  # answered meanwhile, or already closed
        await self.loop.complete(
            call,
            f"No result from the IDE within {item.seconds:g} s: the call timed out "
            "(TOOL_TIMEOUT) and its outcome is unknown.",
            TIMED_OUT,
        )
        await self.loop.emit(
            item.session_id,
            events.error(
                "TOOL_TIMEOUT",
                f"{call.tool_name} had no result within {item.seconds:g} s",
                {"tool": call.tool_name, "timeout_seconds": item.seconds},
                call_id=call.call_id,
            ),
        )
        await self.loop.advance(item.session_id)

    @spans.approval_expired
    async def expired(self, item: Expired) -> None:
        """hitl expired an approval: the model is told and goes on."""
        call = await self.loop.ledger.get(item.session_id, item.call_id)
        if call is None or call.state != "awaiting_approval":
            return
        await self.loop.complete(
            call,
            (
                f"No decision within {item.timeout_seconds} s"
                if item.timeout_seconds
                else "No decision in time"
            )
            + ": the approval expired (HITL_TIMEOUT) and the call was not run.",
            "expired",
        )
        await self.loop.emit(
            item.session_id,
            events.error(
                "HITL_TIMEOUT", f"approval for {call.tool_name} expired", call_id=call.call_id
            ),
        )
        await self.loop.advance(item.session_id)
