"""The session runtime's answers besides a turn: a repeat is a duplicate, a crash or a
refused start is told (without the log when it must), a gateway's rejection becomes its
error, a cut-off turn is announced on take-over, another replica's session is handed on."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool
from services.orchestrator.session.ownership import TAKE_SQL
from services.orchestrator.session.runtime import Runtime
from services.orchestrator.state.store import StoredMessage
from tests.support.runtime import (
    dones,
    said,
    turns,
    until_logged,
)


async def test_a_repeated_client_message_is_a_duplicate_naming_its_first_seq(
    runtime: Runtime,
) -> None:
    await runtime.submit("s1", "u1", said("hello"))
    await dones(runtime, "s1", 1)
    assert await runtime.submit("s1", "u1", said("once", cid="c1")) == "accepted"
    await dones(runtime, "s1", 2)
    assert await runtime.submit("s1", "u1", said("once", cid="c1")) == "duplicate"
    raw = await runtime.store.events_after("s1", 4, 10)
    [duplicate] = [pb.ServerEvent.FromString(event) for _, event in raw]
    assert duplicate.done.status == "duplicate"
    assert (duplicate.done.client_message_id, duplicate.done.first_seq) == ("c1", 3)
    assert turns(runtime).handled.count(("s1", "once")) == 1


async def test_a_crash_is_reported_and_the_session_goes_on(runtime: Runtime) -> None:
    await runtime.submit("s1", "u1", said("boom"))
    await runtime.submit("s1", "u1", said("after"))
    log = await dones(runtime, "s1", 2)
    assert log == [
        ("error", "INTERNAL_ERROR"),
        ("done", "error"),
        ("assistant_message", "after"),
        ("done", "completed"),
    ]


async def test_a_message_that_cannot_start_is_told_without_the_log(runtime: Runtime) -> None:
    hub = runtime.hub
    stream = aiter(await hub.subscribe("gone", 0))
    await runtime.submit("gone", "u1", said("hello"))  # no such session row
    async with asyncio.timeout(5):
        told = [pb.ServerEvent.FromString(raw) for raw in await anext(stream)]
        while len(told) < 2:
            told += [pb.ServerEvent.FromString(raw) for raw in await anext(stream)]
    assert [(e.seq, e.WhichOneof("event")) for e in told] == [(0, "error"), (0, "done")]
    assert pb.ErrorCode.Name(told[0].error.error_code) == "SESSION_NOT_FOUND"
    assert await runtime.store.events_after("gone", 0) == []


@pytest.mark.parametrize(
    ("code", "details", "logged_as", "ends"),
    [
        (pb.RATE_LIMITED, '{"retry_after": 3}', "RATE_LIMITED", True),
        (pb.MISSING_REQUIRED_FIELD, "[1, 2]", "MISSING_REQUIRED_FIELD", False),
        (999, None, "INVALID_MESSAGE_TYPE", False),
    ],
)
async def test_a_rejected_message_becomes_its_error(
    runtime: Runtime, code: int, details: str | None, logged_as: str, ends: bool
) -> None:
    rejected = pb.Rejected(error_code=code, content="refused at the gateway")  # type: ignore[arg-type]
    if details is not None:
        rejected.details_json = details
    await runtime.submit("s1", "u1", pb.ClientMessage(rejected=rejected))
    await until_logged(runtime, "s1", ("error", logged_as))
    await runtime.submit("s1", "u1", said("next"))
    log = await dones(runtime, "s1", 2 if ends else 1)
    assert log[: 2 if ends else 1] == [("error", logged_as), *([("done", "error")] if ends else [])]
    [first] = await runtime.store.events_after("s1", 0, 1)
    error = pb.ServerEvent.FromString(first[1]).error
    expected = json.loads(details) if details and details.startswith("{") else None
    assert (json.loads(error.details_json) if error.HasField("details_json") else None) == expected


async def test_a_session_cut_off_mid_turn_is_told_on_take_over(
    runtime: Runtime, pool: Pool
) -> None:
    await runtime.store.add_message("s1", StoredMessage("user", "before the crash"))
    await pool.execute(
        "update orchestrator.sessions set turn_state = 'running' where session_id = 's1'"
    )
    await runtime.submit("s1", "u1", said("again"))
    assert await dones(runtime, "s1", 2) == [
        ("error", "LLM_STREAM_INTERRUPTED"),
        ("done", "error"),
        ("assistant_message", "again"),
        ("done", "completed"),
    ]


async def test_a_session_another_replica_owns_gets_the_message_by_its_inbox(
    runtime: Runtime, database_url: str
) -> None:
    other = await asyncpg.connect(database_url)
    try:
        assert (await other.fetchrow(TAKE_SQL, "s1"))["got"]  # another replica owns s1
        assert await runtime.submit("s1", "u1", said("for the owner")) == "accepted"
        assert await runtime.ownership.waiting_sessions() == ["s1"]
        assert turns(runtime).handled == []
    finally:
        await other.close()
    [(user, message)] = await runtime.ownership.take_inbox("s1")
    assert (user, message.user_message.content) == ("u1", "for the owner")


async def running_plan(pool: Pool, sid: str) -> None:
    """A plan runs in ``sid``: a user message's turn start leaves the message to its
    handling (the plan is cancelled first)."""
    await pool.execute(
        "insert into orchestrator.plans (plan_id, session_id, approval_request_id, call_id,"
        " planner, goal, steps, status) values ($1, $2, $1, 'c', 'architect', 'g', '[]',"
        " 'running')",
        f"plan-{sid}",
        sid,
    )


async def test_a_message_that_failed_before_it_was_stored_is_applied_on_resend(
    runtime: Runtime,
) -> None:
    """Its claim is marked started with the message, in one commit: a handling that ends
    before the message is stored (a crash, a process killed) leaves the claim open, and the
    IDE's resend is applied rather than answered ``duplicate`` over a message never kept."""
    await runtime.attach("s1", "u1")
    await running_plan(runtime.store.pool, "s1")
    assert await runtime.submit("s1", "u1", said("lost", cid="c-lost")) == "accepted"
    await dones(runtime, "s1", 1)  # the crash, reported
    assert await runtime.store.history("s1") == []
    assert await runtime.submit("s1", "u1", said("lost", cid="c-lost")) == "accepted"
    await dones(runtime, "s1", 2)
    assert [m.content for m in await runtime.store.history("s1")] == ["lost"]
    assert await runtime.submit("s1", "u1", said("lost", cid="c-lost")) == "duplicate"


async def test_with_nothing_open_the_turn_start_keeps_the_message(runtime: Runtime) -> None:
    """The statement that claims the message and begins its turn stores it too: a handling
    that fails after that (here a bug) has lost nothing, and a resend is a duplicate."""
    assert await runtime.submit("s1", "u1", said("boom", cid="c-kept")) == "accepted"
    await dones(runtime, "s1", 1)
    assert [m.content for m in await runtime.store.history("s1")] == ["boom"]
    assert await runtime.submit("s1", "u1", said("boom", cid="c-kept")) == "duplicate"
    assert [m.content for m in await runtime.store.history("s1")] == ["boom"]
