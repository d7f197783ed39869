"""The hitl service over real gRPC: approvals, decisions, expiry, audit, template policy."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Awaitable
from typing import Any

import grpc
import pytest

from codelab.v1 import common_pb2, hitl_pb2
from services.common.channels import error_code
from tests.support.mesh import Mesh

SESSION = "s-hitl"
ARGS = {"path": "main.py", "content": "print('hi')"}
APPROVE, EDIT, REJECT = (
    common_pb2.DECISION_APPROVE,
    common_pb2.DECISION_EDIT,
    common_pb2.DECISION_REJECT,
)


async def create(
    mesh: Mesh, call_id: str = "call-1", session_id: str = SESSION, **fields: Any
) -> hitl_pb2.Approval:
    request: dict[str, Any] = {
        "tool_name": "write_file",
        "arguments_json": json.dumps(ARGS),
        "reason": "File modification requires approval",
        "risk": "medium",
        "agent": "coder",
        **fields,
    }
    approval: hitl_pb2.Approval = await mesh.client.hitl.CreateApproval(
        hitl_pb2.CreateApprovalRequest(call_id=call_id, session_id=session_id, **request)
    )
    return approval


async def decide(
    mesh: Mesh,
    decision: common_pb2.Decision.ValueType,
    call_id: str = "call-1",
    session_id: str = SESSION,
    **fields: Any,
) -> hitl_pb2.DecideResponse:
    reply: hitl_pb2.DecideResponse = await mesh.client.hitl.Decide(
        hitl_pb2.DecideRequest(
            session_id=session_id, call_id=call_id, decision=decision, user_id="u-1", **fields
        )
    )
    return reply


async def audit(mesh: Mesh, session_id: str = SESSION, event_type: str = "") -> list[Any]:
    reply = await mesh.client.hitl.ListAudit(
        hitl_pb2.ListAuditRequest(session_id=session_id, event_type=event_type)
    )
    return list(reply.entries)


async def make_overdue(mesh: Mesh, *call_ids: str) -> None:
    """Move the deadline into the past instead of sleeping through a timeout."""
    await mesh.pool.execute(
        "update hitl.approvals set expires_at = now() - interval '1 second'"
        " where call_id = any($1::text[])",
        list(call_ids),
    )


async def failure(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def assert_failed(
    error: grpc.aio.AioRpcError, status: grpc.StatusCode, code: str
) -> grpc.aio.AioRpcError:
    assert (error.code(), error_code(error)) == (status, code), error.details()
    return error


# --- create + pending ------------------------------------------------------------------


async def test_create_then_list_pending_oldest_first(mesh: Mesh) -> None:
    first = await create(mesh, "call-1", plan_id="plan-1", step_id="3")
    await create(mesh, "call-2", timeout_seconds=30)
    await create(mesh, "call-other", session_id="s-else")
    await create(mesh, "call-overdue")
    await make_overdue(mesh, "call-overdue")

    assert (first.status, first.tool_name, json.loads(first.arguments_json)) == (
        "pending",
        "write_file",
        ARGS,
    )
    assert (first.plan_id, first.step_id, first.agent, first.risk) == (
        "plan-1",
        "3",
        "coder",
        "medium",
    )
    # 0 means HITL_TIMEOUT (300 s by default).
    waited = dt.datetime.fromisoformat(first.expires_at) - dt.datetime.fromisoformat(
        first.created_at
    )
    assert (first.timeout_seconds, waited) == (300, dt.timedelta(seconds=300))

    pending = await mesh.client.hitl.ListPending(hitl_pb2.ListPendingRequest(session_id=SESSION))
    assert [a.call_id for a in pending.approvals] == ["call-1", "call-2"]
    assert pending.approvals[1].timeout_seconds == 30
    assert not pending.approvals[1].HasField("plan_id")


async def test_create_is_idempotent_but_a_call_id_is_never_shared(mesh: Mesh) -> None:
    first = await create(mesh)
    again = await create(mesh)
    assert again == first

    other_session = await failure(create(mesh, session_id="s-else"))
    assert other_session.code() == grpc.StatusCode.INVALID_ARGUMENT
    other_args = await failure(create(mesh, arguments_json='{"path": "other.py"}'))
    assert other_args.code() == grpc.StatusCode.INVALID_ARGUMENT
    not_object = await failure(create(mesh, "call-2", arguments_json="[1]"))
    assert not_object.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- decisions -------------------------------------------------------------------------


async def test_approve_runs_the_original_arguments_and_is_audited(mesh: Mesh) -> None:
    await create(mesh)
    reply = await decide(mesh, APPROVE)

    assert (reply.decision, reply.duplicate) == (APPROVE, False)
    assert json.loads(reply.final_arguments_json) == ARGS
    assert reply.approval.status == "approved"
    [entry] = await audit(mesh)
    assert (entry.call_id, entry.tool_name, entry.decision, entry.event_type, entry.user_id) == (
        "call-1",
        "write_file",
        "approve",
        "hitl_decision",
        "u-1",
    )
    assert json.loads(entry.original_arguments_json) == ARGS
    assert not entry.HasField("modified_arguments_json")
    pending = await mesh.client.hitl.ListPending(hitl_pb2.ListPendingRequest(session_id=SESSION))
    assert not pending.approvals


async def test_edit_runs_the_edited_arguments_and_audits_both(mesh: Mesh) -> None:
    await create(mesh)
    edited = {"path": "main.py", "content": "print('bye')"}
    reply = await decide(
        mesh, EDIT, modified_arguments_json=json.dumps(edited), feedback="nicer greeting"
    )

    assert (reply.decision, reply.approval.status, reply.feedback) == (
        EDIT,
        "edited",
        "nicer greeting",
    )
    assert json.loads(reply.final_arguments_json) == edited
    [entry] = await audit(mesh)
    assert entry.decision == "edit" and entry.feedback == "nicer greeting"
    assert json.loads(entry.original_arguments_json) == ARGS
    assert json.loads(entry.modified_arguments_json) == edited


async def test_reject_runs_nothing_and_keeps_the_feedback(mesh: Mesh) -> None:
    await create(mesh)
    reply = await decide(mesh, REJECT, feedback="do not touch main.py")

    assert (reply.approval.status, reply.final_arguments_json, reply.feedback) == (
        "rejected",
        "",
        "do not touch main.py",
    )
    [entry] = await audit(mesh)
    assert (entry.decision, entry.feedback) == ("reject", "do not touch main.py")


async def test_unknown_and_foreign_calls_are_not_found(mesh: Mesh) -> None:
    await create(mesh, session_id="s-else")
    for call_id, session_id in (("call-missing", SESSION), ("call-1", SESSION)):
        error = await failure(decide(mesh, APPROVE, call_id=call_id, session_id=session_id))
        assert_failed(error, grpc.StatusCode.NOT_FOUND, "PENDING_APPROVAL_NOT_FOUND")
    row = await mesh.pool.fetchrow("select status from hitl.approvals where call_id = 'call-1'")
    assert row is not None and row["status"] == "pending"


@pytest.mark.parametrize(
    ("decision", "modified"),
    [
        (EDIT, None),
        (EDIT, "[1, 2]"),
        (EDIT, "not json"),
        (common_pb2.DECISION_MODIFY, None),
        (common_pb2.DECISION_UNSPECIFIED, None),
    ],
)
async def test_malformed_decisions_are_invalid(
    mesh: Mesh, decision: common_pb2.Decision.ValueType, modified: str | None
) -> None:
    await create(mesh)
    fields = {} if modified is None else {"modified_arguments_json": modified}
    error = await failure(decide(mesh, decision, **fields))
    assert_failed(error, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_DECISION")
    assert not await audit(mesh)


async def test_the_same_decision_again_is_a_duplicate_with_one_audit_row(mesh: Mesh) -> None:
    await create(mesh, "call-1")
    await create(mesh, "call-2")
    edited = json.dumps({"path": "b.py"})
    first = await decide(mesh, APPROVE, feedback="ok")
    again = await decide(mesh, APPROVE)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.final_arguments_json == first.final_arguments_json
    assert (again.approval, again.feedback) == (first.approval, "ok")

    await decide(mesh, EDIT, "call-2", modified_arguments_json=edited)
    # Key order and spacing differ, the arguments do not.
    edit_again = await decide(mesh, EDIT, "call-2", modified_arguments_json='{ "path":"b.py" }')
    assert edit_again.duplicate and json.loads(edit_again.final_arguments_json) == {"path": "b.py"}
    assert sorted(e.call_id for e in await audit(mesh)) == ["call-1", "call-2"]


async def test_a_different_second_decision_is_refused(mesh: Mesh) -> None:
    await create(mesh, "call-1")
    await create(mesh, "call-2")
    await decide(mesh, APPROVE)
    error = await failure(decide(mesh, REJECT))
    assert_failed(error, grpc.StatusCode.FAILED_PRECONDITION, "INVALID_DECISION")
    assert "already approved" in (error.details() or "")

    await decide(mesh, EDIT, "call-2", modified_arguments_json='{"path": "b.py"}')
    other_edit = await failure(
        decide(mesh, EDIT, "call-2", modified_arguments_json='{"path": "c"}')
    )
    assert_failed(other_edit, grpc.StatusCode.FAILED_PRECONDITION, "INVALID_DECISION")
    assert len(await audit(mesh)) == 2


async def test_concurrent_decisions_have_exactly_one_winner(mesh: Mesh) -> None:
    await create(mesh, "call-1")
    same = await asyncio.gather(*(decide(mesh, APPROVE) for _ in range(5)))
    assert sorted(r.duplicate for r in same) == [False, True, True, True, True]

    await create(mesh, "call-2")
    mixed = await asyncio.gather(
        decide(mesh, APPROVE, "call-2"), decide(mesh, REJECT, "call-2"), return_exceptions=True
    )
    winners = [r for r in mixed if isinstance(r, hitl_pb2.DecideResponse)]
    [loser] = [r for r in mixed if isinstance(r, grpc.aio.AioRpcError)]
    assert len(winners) == 1 and not winners[0].duplicate
    assert_failed(loser, grpc.StatusCode.FAILED_PRECONDITION, "INVALID_DECISION")
    assert sorted(e.call_id for e in await audit(mesh)) == ["call-1", "call-2"]


# --- expiry ----------------------------------------------------------------------------


async def test_expire_due_returns_each_overdue_approval_once(mesh: Mesh) -> None:
    await create(mesh, "call-1")
    await create(mesh, "call-fresh")
    await make_overdue(mesh, "call-1")

    first = await mesh.client.hitl.ExpireDue(hitl_pb2.ExpireDueRequest())
    second = await mesh.client.hitl.ExpireDue(hitl_pb2.ExpireDueRequest())
    assert [(a.call_id, a.status) for a in first.expired] == [("call-1", "expired")]
    assert not second.expired

    error = await failure(decide(mesh, APPROVE))
    assert_failed(error, grpc.StatusCode.FAILED_PRECONDITION, "HITL_TIMEOUT")
    [entry] = await audit(mesh)
    assert (entry.call_id, entry.decision, entry.event_type) == (
        "call-1",
        "expired",
        "hitl_timeout",
    )
    assert json.loads(entry.original_arguments_json) == ARGS
    assert (await decide(mesh, APPROVE, "call-fresh")).approval.status == "approved"


async def test_expire_due_respects_its_limit_and_concurrent_sweepers_share_nothing(
    mesh: Mesh,
) -> None:
    calls = [f"call-{i}" for i in range(6)]
    for call_id in calls:
        await create(mesh, call_id)
    await make_overdue(mesh, *calls)

    limited = await mesh.client.hitl.ExpireDue(hitl_pb2.ExpireDueRequest(limit=2))
    assert len(limited.expired) == 2
    sweeps = await asyncio.gather(
        *(mesh.client.hitl.ExpireDue(hitl_pb2.ExpireDueRequest()) for _ in range(3))
    )
    swept = [a.call_id for reply in (limited, *sweeps) for a in reply.expired]
    assert sorted(swept) == sorted(calls)
    assert len(await audit(mesh, event_type="hitl_timeout")) == len(calls)


async def test_deciding_an_overdue_pending_approval_expires_it(mesh: Mesh) -> None:
    await create(mesh)
    await make_overdue(mesh, "call-1")

    error = await failure(decide(mesh, APPROVE))
    assert_failed(error, grpc.StatusCode.FAILED_PRECONDITION, "HITL_TIMEOUT")
    status = await mesh.pool.fetchval("select status from hitl.approvals where call_id = 'call-1'")
    assert status == "expired"
    [entry] = await audit(mesh)
    assert (entry.decision, entry.event_type) == ("expired", "hitl_timeout")
    # Already expired: the sweeper has nothing left to report, a retry is still a timeout.
    assert not (await mesh.client.hitl.ExpireDue(hitl_pb2.ExpireDueRequest())).expired
    retry = await failure(decide(mesh, APPROVE))
    assert_failed(retry, grpc.StatusCode.FAILED_PRECONDITION, "HITL_TIMEOUT")
    assert len(await audit(mesh)) == 1


# --- audit -----------------------------------------------------------------------------


async def test_record_audit_round_trip(mesh: Mesh) -> None:
    entry = hitl_pb2.AuditEntry(
        session_id=SESSION,
        call_id="plan-1",
        decision="plan_modify",
        feedback="skip step 2",
        user_id="u-1",
        event_type="plan_decision",
        details_json='{"steps": [1, 3]}',
    )
    stored = await mesh.client.hitl.RecordAudit(entry)
    assert stored.id > 0 and stored.created_at
    assert json.loads(stored.details_json) == {"steps": [1, 3]}
    assert not stored.HasField("original_arguments_json")
    [listed] = await audit(mesh)
    assert listed == stored

    for bad in (
        hitl_pb2.AuditEntry(session_id=SESSION, decision="plan_approve"),
        hitl_pb2.AuditEntry(
            session_id=SESSION, decision="x", event_type="plan_decision", details_json="{"
        ),
    ):
        error = await failure(mesh.client.hitl.RecordAudit(bad))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_list_audit_filters_by_session_and_event_type_newest_first(mesh: Mesh) -> None:
    for i, (session_id, event_type) in enumerate(
        [(SESSION, "plan_decision"), (SESSION, "hitl_decision"), ("s-else", "plan_decision")] * 2
    ):
        await mesh.client.hitl.RecordAudit(
            hitl_pb2.AuditEntry(
                session_id=session_id, call_id=f"c{i}", decision="x", event_type=event_type
            )
        )

    mine = await audit(mesh)
    assert [e.call_id for e in mine] == ["c4", "c3", "c1", "c0"]
    plans = await audit(mesh, event_type="plan_decision")
    assert [e.call_id for e in plans] == ["c3", "c0"]
    everyone = await audit(mesh, session_id="", event_type="plan_decision")
    assert [e.call_id for e in everyone] == ["c5", "c3", "c2", "c0"]
    limited = await mesh.client.hitl.ListAudit(hitl_pb2.ListAuditRequest(limit=2))
    assert [e.call_id for e in limited.entries] == ["c5", "c4"]
    negative = await failure(mesh.client.hitl.ListAudit(hitl_pb2.ListAuditRequest(limit=-1)))
    assert negative.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- template policy -------------------------------------------------------------------


async def evaluate(
    mesh: Mesh, tool: str, arguments: dict[str, Any], policy: hitl_pb2.HitlPolicy | None
) -> tuple[bool, str]:
    reply = await mesh.client.hitl.Evaluate(
        hitl_pb2.EvaluateRequest(
            session_id=SESSION, tool_name=tool, arguments_json=json.dumps(arguments), policy=policy
        )
    )
    return reply.requires_approval, reply.risk


async def test_evaluate_honours_a_template_policy(mesh: Mesh) -> None:
    push = {"command": "git push origin main"}
    deny = hitl_pb2.HitlPolicy(command_deny=["git push*"])
    assert await evaluate(mesh, "execute_command", push, None) == (True, "medium")
    assert await evaluate(mesh, "execute_command", push, deny) == (True, "high")

    allow = hitl_pb2.HitlPolicy(command_allow=["git push *"])
    assert await evaluate(mesh, "execute_command", push, allow) == (False, "low")

    # never_approve waives a tool's approval, but never a high-risk finding, and never
    # overrides always_approve (whose default still lists write_file).
    waive = hitl_pb2.HitlPolicy(never_approve=["write_file", "execute_command"])
    assert await evaluate(mesh, "write_file", ARGS, waive) == (True, "medium")
    assert await evaluate(mesh, "execute_command", push, waive) == (False, "low")
    assert await evaluate(mesh, "execute_command", {"command": "rm -rf /"}, waive) == (True, "high")
    # A non-empty list replaces its default: read_file is no longer waived here.
    assert await evaluate(mesh, "read_file", ARGS, waive) == (True, "medium")

    replaced = hitl_pb2.HitlPolicy(always_approve=["read_file"], never_approve=["write_file"])
    assert await evaluate(mesh, "write_file", ARGS, replaced) == (False, "low")
    assert await evaluate(mesh, "read_file", ARGS, replaced) == (True, "medium")
    # An empty policy is the default policy.
    assert await evaluate(mesh, "read_file", ARGS, hitl_pb2.HitlPolicy()) == (False, "low")


async def test_a_template_read_only_list_replaces_the_shipped_one(mesh: Mesh) -> None:
    plan = {"command": "terraform plan"}
    status = {"command": "git status"}
    assert await evaluate(mesh, "execute_command", status, None) == (False, "low")
    narrowed = hitl_pb2.HitlPolicy(read_only=["ls"])
    assert await evaluate(mesh, "execute_command", status, narrowed) == (True, "medium")
    # Infrastructure tools are judged by their rule first: the list cannot wave them through.
    extended = hitl_pb2.HitlPolicy(read_only=["@default", "terraform plan"])
    assert await evaluate(mesh, "execute_command", plan, extended) == (True, "medium")
    assert await evaluate(mesh, "execute_command", status, extended) == (False, "low")
    tool = hitl_pb2.HitlPolicy(read_only=["@default", "just test"])
    reply = await mesh.client.hitl.Evaluate(
        hitl_pb2.EvaluateRequest(
            session_id=SESSION,
            tool_name="execute_command",
            arguments_json=json.dumps({"command": "just test && git diff"}),
            policy=tool,
        )
    )
    assert not reply.requires_approval
    assert reply.reason == "Read-only allow-list: just test, git diff"
