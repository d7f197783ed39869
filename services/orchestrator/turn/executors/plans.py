"""Plans: an agent proposes (create_plan), a human decides, the steps run in order.

Each step runs with its own agent; the step's instruction enters the history as a
user message so the model sees what it is asked to do. Progress is reported with
plan_update, plan_progress and agent_chain_update; at the end control returns to
the orchestrator.

A create_plan while a plan runs asks to change the approved plan
(plan_modification_requested, then the revision's approval): approved, the revision
replaces the running plan; rejected, the running plan goes on where it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.state import events
from services.orchestrator.state.events import new_id
from services.orchestrator.state.store import SessionStore, StoredMessage
from services.orchestrator.turn.ledger import Ledger, LedgerCall, Plan
from services.orchestrator.turn.port import TurnPort

_MINUTES = re.compile(r"(\d+)\s*(?:min|мин)")


def estimate(steps: list[dict[str, Any]]) -> str:
    """Sum of the steps' estimates in minutes (5 per step without one)."""
    total = 0
    for step in steps:
        match = _MINUTES.search(str(step.get("estimated_time", "")))
        total += int(match.group(1)) if match else 5
    return f"{total} min"


PLAN_DECISIONS = ("approve", "reject", "modify")


@dataclass(frozen=True)
class PlanDecision:
    """A human's answer to a plan approval: ``decision`` approve | reject | modify (any
    other value is refused as INVALID_DECISION)."""

    request_id: str
    decision: str
    feedback: str | None = None


class PlanRunner:
    """The ``plan`` executor (create_plan proposes a plan), the human's decisions on it and
    the steps' execution, over the loop's port."""

    gated = False

    def __init__(
        self,
        port: TurnPort,
        ledger: Ledger,
        store: SessionStore,
        hitl: HitlClient,
        agents: AgentRegistry,
    ) -> None:
        self.port = port
        self.ledger = ledger
        self.store = store
        self.hitl = hitl
        self.agents = agents

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        """create_plan: the plan waits for the human's decision."""
        sid = call.session_id
        unknown = [s["agent"] for s in arguments["subtasks"] if not self.agents.has(s["agent"])]
        if unknown:
            await self.port.complete(
                call, f"Error: unknown agents in the plan: {unknown}", "failed"
            )
            return False
        running = await self.ledger.running_plan(sid)
        steps = [
            {
                "id": str(i),
                "desc": s["description"],
                "agent": s["agent"],
                "status": "pending",
                "estimated_time": s.get("estimated_time", ""),
            }
            for i, s in enumerate(arguments["subtasks"], start=1)
        ]
        plan = Plan(
            plan_id=new_id("plan"),
            session_id=sid,
            approval_request_id=new_id("plan-approval"),
            call_id=call.call_id,
            planner=template.name,
            goal=arguments["goal"],
            steps=steps,
            status="awaiting_approval",
        )
        await self.ledger.create_plan(plan)
        await self.ledger.set_state(
            call,
            "awaiting_approval",
            arguments=arguments,
            reason="plan approval",
            requires_approval=True,
        )
        revision = (
            []
            if running is None
            else [
                events.plan_modification_requested(
                    running.plan_id,
                    plan.approval_request_id,
                    template.name,
                    f"revised plan: {plan.goal}",
                )
            ]
        )
        await self.port.emit(
            sid,
            *revision,
            events.plan_approval_required(
                plan.plan_id, plan.approval_request_id, plan.goal, len(steps), estimate(steps)
            ),
            events.plan_update(plan.plan_id, steps, steps[0]["id"]),
            events.done("awaiting_plan_approval"),
        )
        return True

    async def decide(self, sid: str, user_id: str, decision: PlanDecision) -> None:
        port = self.port
        plan = await self.ledger.plan_by_request(sid, decision.request_id)
        if plan is None:
            await port.emit(
                sid,
                events.error(
                    "PENDING_APPROVAL_NOT_FOUND", f"no plan approval {decision.request_id}"
                ),
                events.done("error"),
            )
            return
        name = decision.decision
        if plan.status != "awaiting_approval" or name not in PLAN_DECISIONS:
            await port.emit(
                sid,
                events.error("INVALID_DECISION", f"plan {plan.plan_id} is {plan.status}"),
                events.done("error"),
            )
            return
        feedback = decision.feedback
        await self.hitl.audit(
            sid,
            "plan_decision",
            f"plan_{name}",
            user_id,
            call_id=plan.call_id,
            feedback=feedback,
            details={"plan_id": plan.plan_id, "goal": plan.goal},
        )
        call = await self.ledger.get(sid, plan.call_id)
        assert call is not None  # created with the plan
        # A plan that ran while this one was proposed is what this one revises.
        revised = await self.ledger.running_plan(sid) if name != "modify" else None
        if name == "approve":
            if revised is not None:
                revised.status = "modified"
                await self.ledger.save_plan(revised)
                await port.emit(sid, self.completed(revised, "modified"))
            plan.status = "running"
            await port.complete(call, "The user approved the plan; it runs step by step now.")
            await self.start_step(plan, 0)
            await port.advance(sid)
        elif name == "reject":
            plan.status = "rejected"
            await self.ledger.save_plan(plan)
            note = f" Feedback: {feedback}" if feedback else ""
            goes_on = " The approved plan goes on: finish its current step." if revised else ""
            await port.complete(call, "The user rejected the plan." + note + goes_on, "rejected")
            await port.emit(
                sid, events.plan_rejected(plan.plan_id, plan.approval_request_id, feedback)
            )
            if revised is not None:
                await port.advance(sid)
            else:
                await port.finish(sid, await port.template(sid, plan.planner))
        else:
            plan.status = "modified"
            await self.ledger.save_plan(plan)
            await port.complete(
                call,
                f"The user asked to change the plan: {feedback or ''}. "
                "Propose a revised plan with create_plan.",
                "rejected",
            )
            await port.switch(sid, plan.planner, "plan modification requested", method="plan")
            await port.notify(
                sid,
                events.plan_modification_requested(
                    plan.plan_id, plan.approval_request_id, plan.planner, feedback
                ),
            )
            await port.advance(sid)

    async def start_step(self, plan: Plan, index: int) -> None:
        port, sid = self.port, plan.session_id
        plan.current_step = index
        step = plan.steps[index]
        step["status"] = "running"
        await self.ledger.save_plan(plan)
        await port.switch(sid, step["agent"], f"plan step {step['id']}", method="plan")
        await port.emit(
            sid, events.plan_update(plan.plan_id, plan.steps, step["id"]), self.chain(plan)
        )
        await self.store.add_message(
            sid,
            StoredMessage(
                "user",
                f"Plan step {step['id']} of {len(plan.steps)} (goal: {plan.goal}): {step['desc']}",
                name="plan",
            ),
        )

    def chain(self, plan: Plan) -> Any:
        current = plan.steps[min(plan.current_step, len(plan.steps) - 1)]["agent"]
        return events.agent_chain_update(
            plan.plan_id,
            [(s["agent"], s["desc"][:60], s["status"]) for s in plan.steps],
            current,
        )

    async def agent_finished(self, sid: str, answer: str) -> bool:
        """A step's agent answered: record it and start the next step. False: no plan runs."""
        port = self.port
        plan = await self.ledger.running_plan(sid)
        if plan is None:
            return False
        step = plan.steps[plan.current_step]
        step["status"], step["result"] = "done", answer[:500]
        await port.emit(sid, events.plan_progress(plan.plan_id, step["id"], answer[:500], "done"))
        if plan.current_step + 1 < len(plan.steps):
            await self.start_step(plan, plan.current_step + 1)
            return True
        plan.status = "completed"
        await self.ledger.save_plan(plan)
        await port.emit(
            sid,
            events.plan_update(plan.plan_id, plan.steps, step["id"]),
            self.chain(plan),
            self.completed(plan, "completed"),
        )
        return False

    @staticmethod
    def completed(plan: Plan, status: str) -> Any:
        """execution_completed for ``plan``, summing up what each step reported."""
        summary = "\n".join(
            f"{s['id']}. {s['desc']} ({s['agent']}, {s['status']}): {s.get('result', '')}"
            for s in plan.steps
        )
        return events.execution_completed(
            "plan", plan.plan_id, status, summary, plan_id=plan.plan_id, agent=plan.planner
        )

    async def fail_running(self, sid: str, reason: str) -> None:
        plan = await self.ledger.running_plan(sid)
        if plan is None:
            return
        step = plan.steps[plan.current_step]
        step["status"], plan.status = "error", "failed"
        await self.ledger.save_plan(plan)
        await self.port.emit(
            sid,
            events.plan_progress(plan.plan_id, step["id"], reason, "error"),
            events.plan_update(plan.plan_id, plan.steps, step["id"]),
            self.completed(plan, "failed"),
        )

    async def cancel_running(self, sid: str) -> None:
        plan = await self.ledger.running_plan(sid)
        if plan is not None:
            plan.status = "cancelled"
            await self.ledger.save_plan(plan)
