"""The session runtime: one worker per session runs its messages one at a time and in
order, a cancel or a busy policy interrupts or refuses, and a turn moves the session's
state by how it ended (tests/support/runtime.py plays the turns)."""

from __future__ import annotations

import pytest

from services.common.db import Pool
from services.orchestrator.session.runtime import Runtime
from tests.support.runtime import (
    CANCEL,
    dones,
    gate,
    said,
    started,
    turns,
    until,
    until_logged,
)


async def test_a_sessions_messages_run_one_at_a_time_in_order(runtime: Runtime) -> None:
    first = gate(runtime, "first")
    for text in ("first", "second", "third"):
        assert await runtime.submit("s1", "u1", said(text)) == "accepted"
    await runtime.submit("s2", "u1", said("other session"))
    await dones(runtime, "s2", 1)  # another session is not held up

    async def first_held() -> bool:
        return ("s1", "first") in turns(runtime).handled

    await until(first_held)  # sessions' workers start in any order
    assert sorted(turns(runtime).handled) == [("s1", "first"), ("s2", "other session")]
    first.set()
    log = await dones(runtime, "s1", 3)
    assert [text for kind, text in log if kind == "assistant_message"] == [
        "first",
        "second",
        "third",
    ]


async def test_only_a_user_messages_start_reads_what_its_model_call_reads(
    runtime: Runtime,
) -> None:
    await runtime.submit("s1", "u1", said("hello"))
    await dones(runtime, "s1", 1)
    await runtime.submit("s1", "u1", CANCEL)
    await dones(runtime, "s1", 2)
    user, cancel = turns(runtime).contexts
    assert user is not None and cancel is None
    history, handover = user
    assert history == [] and handover["files_modified"] == []  # a new session's


async def test_a_turn_moves_the_session_by_how_it_ended(runtime: Runtime, pool: Pool) -> None:
    turns(runtime).status = "awaiting_user"
    await runtime.submit("s1", "u1", said("which file?"))
    await dones(runtime, "s1", 1)

    async def settled() -> bool:
        row = await pool.fetchrow(
            "select state, turn_state from orchestrator.sessions where session_id = 's1'"
        )
        return tuple(row) == ("WAITING_FOR_CLARIFICATION", "idle")

    await until(settled)
    assert turns(runtime).turns_over == ["s1"]  # its budget goes with it (written before)


async def test_a_turn_waiting_for_a_tool_result_keeps_its_budget(runtime: Runtime) -> None:
    turns(runtime).status = "awaiting_tool_result"
    await runtime.submit("s1", "u1", said("read a.py"))
    await dones(runtime, "s1", 1)
    turns(runtime).status = "completed"
    await runtime.submit("s1", "u1", said("and b.py"))
    await dones(runtime, "s1", 2)

    async def one_turn_over() -> bool:
        return turns(runtime).turns_over == ["s1"]  # only the turn that ended

    await until(one_turn_over)


async def test_a_cancel_interrupts_the_running_turn(runtime: Runtime) -> None:
    gate(runtime, "long")
    await runtime.submit("s1", "u1", said("long"))
    await started(runtime)
    assert await runtime.submit("s1", "u1", CANCEL) == "accepted"
    assert await dones(runtime, "s1", 1) == [("done", "cancelled")]
    assert turns(runtime).handled == [("s1", "long"), ("s1", "cancelled")]
    await runtime.submit("s1", "u1", said("next"))
    assert (await dones(runtime, "s1", 2))[-2:] == [
        ("assistant_message", "next"),
        ("done", "completed"),
    ]


async def test_a_cancel_of_an_idle_session_is_answered(runtime: Runtime) -> None:
    await runtime.submit("s1", "u1", CANCEL)
    assert await dones(runtime, "s1", 1) == [("done", "cancelled")]


@pytest.mark.parametrize("policy", ["reject", "interrupt"])
async def test_a_busy_session_applies_its_policy(runtime: Runtime, policy: str) -> None:
    first = gate(runtime, "first")
    await runtime.store.set_busy_policy("s1", policy)
    await runtime.submit("s1", "u1", said("first"))
    await started(runtime)
    await runtime.submit("s1", "u1", said("second", cid="c2"))
    if policy == "reject":
        await until_logged(runtime, "s1", ("error", "TURN_IN_PROGRESS"))
        first.set()
        log = await dones(runtime, "s1", 1)
        assert log == [
            ("error", "TURN_IN_PROGRESS"),
            ("assistant_message", "first"),
            ("done", "completed"),
        ]
        # Refused, so not claimed: the resend is applied.
        await runtime.submit("s1", "u1", said("second", cid="c2"))
        assert (await dones(runtime, "s1", 2))[-2][1] == "second"
    else:
        log = await dones(runtime, "s1", 2)
        assert log == [
            ("done", "cancelled"),
            ("assistant_message", "second"),
            ("done", "completed"),
        ]


async def test_two_cancels_of_a_running_turn_each_get_their_done(runtime: Runtime) -> None:
    gate(runtime, "long")
    await runtime.submit("s1", "u1", said("long"))
    await started(runtime)
    await runtime.submit("s1", "u1", CANCEL)
    await runtime.submit("s1", "u1", CANCEL)  # before the turn has seen the first
    assert await dones(runtime, "s1", 2) == [("done", "cancelled"), ("done", "cancelled")]
