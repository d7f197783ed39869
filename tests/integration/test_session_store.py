"""The session rows: attaching creates a session on first use (also when two replicas attach
at once); a turn's start commits without a WAL flush and leaves the connection as it was, and
claims an unclaimed client message id in the same statement."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from asyncpg import Pool

from services.common.db import create_pool
from services.common.limit_settings import LimitSettings
from services.orchestrator.errors import SessionNotFound
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.state.store import (
    AgentAhead,
    Repeated,
    RowChanges,
    SessionStore,
    StoredMessage,
    Summary,
    SwitchRow,
    TurnStart,
    Unclaimed,
)
from services.orchestrator.turn.ledger import Ledger, LedgerCall


@pytest.fixture
async def single(database_url: str) -> AsyncIterator[Pool]:
    """A pool of one connection: what a statement leaves on its connection shows."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def test_an_attach_waiting_on_a_concurrent_creation_sees_the_session(
    pool: Pool, database_url: str
) -> None:
    other = await asyncpg.connect(database_url)
    try:
        # Another replica is creating the session and has not committed yet.
        creating = other.transaction()
        await creating.start()
        await other.execute(
            "insert into orchestrator.sessions (session_id, user_id, current_agent) "
            "values ('raced', 'u1', 'orchestrator')"
        )
        attach = asyncio.create_task(SessionStore(pool).attach("raced", "u1", "orchestrator"))
        await asyncio.sleep(0.2)  # the attach's insert now waits on the row lock
        assert not attach.done()
        await creating.commit()
        await asyncio.wait_for(attach, 10)  # no SessionNotFound: the row is seen
    finally:
        await other.close()


async def test_attaching_to_another_users_session_is_not_found(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("mine", "u1", "orchestrator")
    with pytest.raises(SessionNotFound):
        await store.attach("mine", "u2", "orchestrator")


async def test_the_attach_that_creates_a_session_gives_it_its_title_and_prompt(
    pool: Pool,
) -> None:
    store = SessionStore(pool)
    await store.attach("titled", "u1", "ask", "Fix the build", "Answer briefly.")
    await store.attach("titled", "u1", "coder", "Another title", "Another prompt.")
    row = await store.get_session("titled")
    assert (row.title, row.system_prompt, row.current_agent) == (
        "Fix the build",
        "Answer briefly.",
        "ask",
    )


async def test_a_turn_start_is_visible_and_leaves_the_connection_flushing(single: Pool) -> None:
    store = SessionStore(single)
    await store.attach("flush", "u1", "orchestrator")  # created without a flush too
    assert await single.fetchval("show synchronous_commit") == "on"
    start = await store.begin_turn("flush", "RESEARCHING", ["INITED"])
    assert isinstance(start, TurnStart)
    assert start.session.session_id == "flush"
    # The same (only) connection: the statement's setting did not outlive it.
    assert await single.fetchval("show synchronous_commit") == "on"
    row = await single.fetchrow(
        "select turn_state, state from orchestrator.sessions where session_id = 'flush'"
    )
    assert (row["turn_state"], row["state"]) == ("running", "RESEARCHING")


async def test_a_turn_end_is_visible_and_leaves_the_connection_flushing(single: Pool) -> None:
    store = SessionStore(single)
    await store.attach("ended", "u1", "orchestrator")
    await store.begin_turn("ended", "RESEARCHING", ["INITED"])
    await store.end_turn("ended", "COMPLETED", ["RESEARCHING"], True, (5, 50))
    assert await single.fetchval("show synchronous_commit") == "on"
    row = await single.fetchrow(
        "select turn_state, state, tool_tokens_offered, tool_tokens_all"
        " from orchestrator.sessions where session_id = 'ended'"
    )
    assert tuple(row) == ("idle", "COMPLETED", 5, 50)


async def test_turns_that_end_together_end_in_one_statement_each_as_its_own(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ends that are queued together are written by one statement; each session
    gets its own target, sources, task end and counts, and its caller returns only once
    its end is committed."""
    store = SessionStore(pool)
    sessions = ("end-1", "end-2", "end-3", "end-4")
    for sid in sessions:
        await store.attach(sid, "u1", "orchestrator")
        await store.begin_turn(sid, "RESEARCHING", ["INITED"])
    written = statements_of(store, "write_ends", monkeypatch)
    await asyncio.gather(
        store.end_turn("end-1", "COMPLETED", ["RESEARCHING"], True, (1, 10)),
        store.end_turn("end-2", None, [], False, (2, 20)),
        store.end_turn("end-3", "FAILED", ["RESEARCHING", "EXECUTING"], False),
        store.end_turn("end-4", "COMPLETED", ["EXECUTING"], True, (4, 40)),  # not a source
    )
    assert written == [list(sessions)]  # one statement
    rows = await pool.fetch(
        "select session_id, turn_state, state, tool_tokens_offered, tool_tokens_all,"
        " finished_at is not null as finished from orchestrator.sessions"
        " where session_id = any($1::text[]) order by session_id",
        list(sessions),
    )
    assert [tuple(r) for r in rows] == [
        ("end-1", "idle", "COMPLETED", 1, 10, True),
        ("end-2", "idle", "RESEARCHING", 2, 20, False),
        ("end-3", "idle", "FAILED", 0, 0, False),
        ("end-4", "idle", "RESEARCHING", 4, 40, False),
    ]


async def turn_state(pool: Pool, sid: str) -> str:
    return str(
        await pool.fetchval(
            "select turn_state from orchestrator.sessions where session_id = $1", sid
        )
    )


async def test_a_turn_start_claims_a_new_client_message_id(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("claims", "u1", "orchestrator")
    start = await store.begin_turn("claims", None, [], Unclaimed("m-1", "user_message", False))
    assert isinstance(start, TurnStart)
    row = await pool.fetchrow(
        "select kind, started from orchestrator.client_messages "
        "where session_id = 'claims' and client_message_id = 'm-1'"
    )
    assert (row["kind"], row["started"]) == ("user_message", False)
    assert await turn_state(pool, "claims") == "running"


@pytest.mark.parametrize(
    ("started", "live", "applies"),
    [
        (True, False, False),  # applied before: a repeat
        (False, True, False),  # claimed by a delivery waiting in this process: a repeat
        (False, False, True),  # claimed by a delivery that died before it started: apply
    ],
)
async def test_a_turn_start_on_a_claimed_id_begins_only_when_the_claim_never_started(
    pool: Pool, started: bool, live: bool, applies: bool
) -> None:
    store = SessionStore(pool)
    sid = f"claimed-{started}-{live}"
    await store.attach(sid, "u1", "orchestrator")
    await pool.execute(
        "insert into orchestrator.client_messages (session_id, client_message_id, kind, "
        "started, first_seq) values ($1, 'm-1', 'user_message', $2, $3)",
        sid,
        started,
        7 if started else None,
    )
    start = await store.begin_turn(
        sid, "RESEARCHING", ["INITED"], Unclaimed("m-1", "user_message", live)
    )
    if applies:
        assert isinstance(start, TurnStart)
        assert await turn_state(pool, sid) == "running"
    else:
        assert start == Repeated(7 if started else None)
        # Nothing began: the session is as it was.
        row = await pool.fetchrow(
            "select turn_state, state from orchestrator.sessions where session_id = $1", sid
        )
        assert (row["turn_state"], row["state"]) == ("idle", "INITED")


async def test_a_turn_start_of_a_missing_session_is_not_found(pool: Pool) -> None:
    with pytest.raises(SessionNotFound):
        await SessionStore(pool).begin_turn("nowhere", None, [])


async def session_row(pool: Pool, sid: str) -> tuple[object, ...]:
    row = await pool.fetchrow(
        "select current_agent, switch_count, last_switch_at is not null as switched,"
        " agent_versions, tool_tokens_offered, tool_tokens_all"
        " from orchestrator.sessions where session_id = $1",
        sid,
    )
    assert row is not None
    return tuple(row.values())


async def switches(pool: Pool, sid: str) -> list[tuple[str, str, str, str | None, str]]:
    rows = await pool.fetch(
        "select from_agent, to_agent, reason, confidence, method"
        " from orchestrator.agent_switches where session_id = $1 order by id",
        sid,
    )
    return [tuple(r.values()) for r in rows]


async def test_a_turns_switch_pin_and_counts_are_one_write_of_the_row(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("rows", "u1", "orchestrator")
    switch = SwitchRow("orchestrator", "coder", "requested by the user", None, "explicit")
    changes = RowChanges(switch, ("coder", 3), (120, 900))
    await store.write_changes("rows", changes, flush=False)
    assert await session_row(pool, "rows") == ("coder", 1, True, {"coder": 3}, 120, 900)
    assert await switches(pool, "rows") == [tuple(switch)]
    # Each part alone leaves the others as they were.
    await store.write_changes("rows", RowChanges(tool_tokens=(30, 900)), flush=True)
    await store.write_changes("rows", RowChanges(pin=("ask", 1)), flush=True)
    assert await session_row(pool, "rows") == (
        "coder",
        1,
        True,
        {"coder": 3, "ask": 1},
        150,
        1800,
    )
    assert len(await switches(pool, "rows")) == 1
    back = SwitchRow("coder", "orchestrator", "task completed", "high", "completion")
    await store.write_changes("rows", RowChanges(switch=back), flush=False)
    assert (await session_row(pool, "rows"))[:2] == ("orchestrator", 2)
    assert await switches(pool, "rows") == [tuple(switch), tuple(back)]


async def test_a_turn_start_switches_to_the_agent_given_ahead_and_pins_it(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("ahead", "u1", "orchestrator")
    coder = AgentAhead("coder", 3, "requested by the user", None, "explicit")
    start = await store.begin_turn(
        "ahead", None, [], user=StoredMessage("user", "fix it"), ahead=coder
    )
    assert isinstance(start, TurnStart) and start.stored
    made = SwitchRow("orchestrator", "coder", "requested by the user", None, "explicit")
    assert (start.switched, start.pinned) == (made, True)
    assert await session_row(pool, "ahead") == ("coder", 1, True, {"coder": 3}, 0, 0)
    assert await switches(pool, "ahead") == [tuple(made)]
    assert start.session.current_agent == "coder"
    before = start.before()  # the row as the message found it
    assert (before.current_agent, before.agent_versions) == ("orchestrator", {})
    # The agent is current and pinned now: the next message names it again, nothing moves.
    await store.end_turn("ahead", None, [], False)
    again = await store.begin_turn(
        "ahead", None, [], user=StoredMessage("user", "more"), ahead=coder._replace(version=4)
    )
    assert isinstance(again, TurnStart) and (again.switched, again.pinned) == (None, False)
    assert await session_row(pool, "ahead") == ("coder", 1, True, {"coder": 3}, 0, 0)
    assert again.before() == again.session


async def test_a_repeated_message_switches_nothing(pool: Pool) -> None:
    store = SessionStore(pool)
    await store.attach("again", "u1", "orchestrator")
    coder = AgentAhead("coder", 3, "requested by the user", None, "explicit")
    first = await store.begin_turn(
        "again", None, [], Unclaimed("m-1", "user_message", False),
        user=StoredMessage("user", "fix it"), ahead=coder,
    )  # fmt: skip
    assert isinstance(first, TurnStart) and first.switched is not None
    await store.end_turn("again", None, [], False)
    await pool.execute(
        "update orchestrator.sessions set current_agent = 'orchestrator' where session_id = $1",
        "again",
    )
    repeat = await store.begin_turn(
        "again", None, [], Unclaimed("m-1", "user_message", True),
        user=StoredMessage("user", "fix it"), ahead=coder,
    )  # fmt: skip
    assert isinstance(repeat, Repeated)
    assert (await session_row(pool, "again"))[:2] == ("orchestrator", 1)
    assert len(await switches(pool, "again")) == 1


async def test_row_changes_that_come_together_are_written_together_each_in_order(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes of several sessions queued together share a statement; a session's second
    change goes in a statement after its first (one row per session each), so both hold."""
    store = SessionStore(pool)
    for sid in ("rows-a", "rows-b"):
        await store.attach(sid, "u1", "orchestrator")
    statements = statements_of(store, "write_rows", monkeypatch)
    to_coder = SwitchRow("orchestrator", "coder", "asked", None, "explicit")
    back = SwitchRow("coder", "orchestrator", "task completed", "high", "completion")
    await asyncio.gather(
        store.write_changes("rows-a", RowChanges(to_coder, ("coder", 3), (10, 100)), flush=False),
        store.write_changes("rows-b", RowChanges(pin=("ask", 2)), flush=True),
        store.write_changes("rows-a", RowChanges(back, None, (5, 50)), flush=False),
    )
    assert statements == [["rows-a", "rows-b", "rows-a"]]  # one batch: two rounds
    assert await session_row(pool, "rows-a") == (
        "orchestrator",
        2,
        True,
        {"coder": 3},
        15,
        150,
    )
    assert await switches(pool, "rows-a") == [tuple(to_coder), tuple(back)]
    assert (await session_row(pool, "rows-b"))[:4] == ("orchestrator", 0, False, {"ask": 2})
    assert await switches(pool, "rows-b") == []


async def test_messages_that_come_together_are_one_statement_in_their_order(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages of several sessions queued together are stored by one statement; a
    session's keep their order, each keeps its tool calls and counts, and a claim one
    carries out is started by the same commit."""
    store = SessionStore(pool)
    for sid in ("msg-a", "msg-b"):
        await store.attach(sid, "u1", "coder")
    claimed = await store.begin_turn("msg-b", None, [], Unclaimed("m-9", "user_message", False))
    assert isinstance(claimed, TurnStart)
    statements: list[int] = []
    write = store.grouped.write_messages

    async def counted(messages: list[Any]) -> None:
        statements.append(len(messages))
        await write(messages)

    monkeypatch.setattr(store.grouped, "write_messages", counted)
    asked = [{"id": "call-1", "name": "read_file", "arguments": '{"path": "a.py"}'}]
    await asyncio.gather(
        store.add_message("msg-a", StoredMessage("user", "first")),
        store.add_message("msg-b", StoredMessage("user", "hello"), applies=("m-9", 7)),
        store.add_message("msg-a", StoredMessage("assistant", "", tool_calls=asked), flush=False),
        store.add_message("msg-a", StoredMessage("tool", "x = 1", tool_call_id="call-1")),
    )
    assert statements == [4]
    history = await store.history("msg-a")
    assert [(m.role, m.content, m.tool_calls) for m in history] == [
        ("user", "first", None),
        ("assistant", "", asked),
        ("tool", "x = 1", None),
    ]
    assert history[2].tool_call_id == "call-1" and history[0].tokens > 0
    assert [m.content for m in await store.history("msg-b")] == ["hello"]
    claim = await pool.fetchrow(
        "select started, first_seq from orchestrator.client_messages"
        " where session_id = 'msg-b' and client_message_id = 'm-9'"
    )
    assert tuple(claim) == (True, 7)


async def test_row_changes_leave_the_connection_flushing(single: Pool) -> None:
    store = SessionStore(single)
    await store.attach("unflushed", "u1", "orchestrator")
    await store.write_changes("unflushed", RowChanges(pin=("coder", 1)), flush=False)
    assert await single.fetchval("show synchronous_commit") == "on"
    # Nothing to write: no statement, nothing changes.
    await store.write_changes("unflushed", RowChanges(), flush=True)
    assert (await session_row(single, "unflushed"))[3] == {"coder": 1}


async def test_an_attach_returns_the_owner_and_usage_is_counted_for_it(pool: Pool) -> None:
    """The owner an attach returns is what the usage of the session's model calls is
    counted for, without reading the session again; its system prompt is the stored one."""
    store = SessionStore(pool)
    created = await store.attach("owned", "u1", "orchestrator", "t", "be brief")
    assert created == ("u1", 0, "be brief")  # created: no log
    again = await store.attach("owned", "", "orchestrator", "", "ignored")  # no auth: any stream
    assert (again.owner, again.system_prompt) == ("u1", "be brief")  # the stored prompt
    limits = UserLimits(pool, LimitSettings())
    limits.owner_is("owned", "u1")
    await pool.execute(
        "update orchestrator.sessions set user_id = 'moved' where session_id = 'owned'"
    )
    assert await limits.user_of("owned") == "u1"  # remembered: no read
    assert await limits.user_of("never-attached") == ""  # read: no such session


async def test_a_model_calls_history_and_hand_over_are_one_read(pool: Pool) -> None:
    store = SessionStore(pool)
    assert await store.turn_context("nobody") == (
        [],
        {
            "last_switch": None,
            "last_error": None,
            "files_modified": [],
            "plan_steps": None,
            "metadata": None,
        },
    )
    await store.attach("read", "u1", "coder")
    await store.set_context_metadata("read", {"user_preferences": "tabs"})
    await store.add_message("read", StoredMessage("user", "hello"))
    history, handover = await store.turn_context("read")
    assert [(m.role, m.content) for m in history] == [("user", "hello")]
    assert handover["metadata"] == {"user_preferences": "tabs"}
    assert await store.context("read") == history


async def test_a_user_messages_turn_start_reads_what_its_model_call_reads(pool: Pool) -> None:
    """``begin_turn`` with ``read_context``: the same history (every field) and hand-over
    as ``turn_context``, a summary, tool calls and reasoning included; none unless asked,
    and none when the delivery is a repeat."""
    store = SessionStore(pool)
    await store.attach("ctx", "u1", "coder")
    await store.set_context_metadata("ctx", {"user_preferences": "tabs"})
    await store.add_message("ctx", StoredMessage("user", "old news"))
    first = await pool.fetchval(
        "select min(id) from orchestrator.messages where session_id = 'ctx'"
    )
    await store.add_summary("ctx", Summary(first, first, 1, "the user said old news", 6))
    await store.add_message("ctx", StoredMessage("user", "read a.py"))
    asked = [{"id": "call-1", "name": "read_file", "arguments": '{"path": "a.py"}'}]
    await store.add_message("ctx", StoredMessage("assistant", "", tool_calls=asked, reasoning="hm"))
    tool = StoredMessage("tool", '{"content": "x = 1"}', name="read_file", tool_call_id="call-1")
    await store.add_message("ctx", tool)
    expected = await store.turn_context("ctx")
    assert [m.role for m in expected[0]] == ["summary", "user", "assistant", "tool"]
    start = await store.begin_turn("ctx", None, [], read_context=True)
    assert isinstance(start, TurnStart) and start.context is not None
    history, handover = start.context
    assert [dataclasses.asdict(m) for m in history] == [dataclasses.asdict(m) for m in expected[0]]
    assert history[2].tool_calls == asked and history[2].reasoning == "hm"
    assert handover == expected[1] and handover["metadata"] == {"user_preferences": "tabs"}
    plain = await store.begin_turn("ctx", None, [])
    assert isinstance(plain, TurnStart) and plain.context is None
    claim = Unclaimed("m-1", "user_message", False)
    assert isinstance(await store.begin_turn("ctx", None, [], claim, read_context=True), TurnStart)
    await store.add_message("ctx", StoredMessage("user", "again"), applies=("m-1", 3))
    again = await store.begin_turn("ctx", None, [], claim, read_context=True)
    assert again == Repeated(3)


async def claim_row(pool: Pool, sid: str, cid: str) -> tuple[object, ...] | None:
    row = await pool.fetchrow(
        "select started, first_seq from orchestrator.client_messages"
        " where session_id = $1 and client_message_id = $2",
        sid,
        cid,
    )
    return None if row is None else (row["started"], row["first_seq"])


async def test_a_user_messages_turn_start_stores_it_after_reading_the_context(
    pool: Pool,
) -> None:
    """With nothing open, ``begin_turn`` stores the user message (its token count too) and
    starts the claim it carries out, made by the same statement or before it; the context
    it read does not hold the message."""
    store = SessionStore(pool)
    await store.attach("kept", "u1", "coder")
    await store.add_message("kept", StoredMessage("user", "earlier"))
    user = StoredMessage("user", "fix the build")
    claim = Unclaimed("m-1", "user_message", False)
    start = await store.begin_turn(
        "kept", None, [], claim, read_context=True, user=user, applies=("m-1", 4)
    )
    assert isinstance(start, TurnStart) and start.stored and start.context is not None
    assert [m.content for m in start.context[0]] == ["earlier"]
    history = await store.history("kept")
    assert [(m.role, m.content) for m in history] == [("user", "earlier"), ("user", user.content)]
    assert history[-1].tokens == user.token_count > 0
    assert await claim_row(pool, "kept", "m-1") == (True, 4)
    # A claim made when the message arrived (a Submit) is started by the turn's start.
    await pool.execute(
        "insert into orchestrator.client_messages (session_id, client_message_id, kind)"
        " values ('kept', 'm-2', 'user_message')"
    )
    again = StoredMessage("user", "and the tests")
    start = await store.begin_turn("kept", None, [], user=again, applies=("m-2", 9))
    assert isinstance(start, TurnStart) and start.stored
    assert await claim_row(pool, "kept", "m-2") == (True, 9)
    assert (await store.history("kept"))[-1].content == "and the tests"
    # A repeat of m-1 stores nothing.
    repeat = await store.begin_turn("kept", None, [], claim, user=user, applies=("m-1", 12))
    assert repeat == Repeated(4)
    assert len(await store.history("kept")) == 3


@pytest.mark.parametrize("open_work", ["call", "plan"])
async def test_a_turn_start_with_work_open_leaves_the_user_message_to_its_handling(
    pool: Pool, open_work: str
) -> None:
    """An open call is answered (or a running plan cancelled) before the user speaks: the
    turn's start stores nothing and leaves the claim open for the message's own write, and
    the agent the message names to its routing."""
    store, sid = SessionStore(pool), f"open-{open_work}"
    await store.attach(sid, "u1", "coder")
    if open_work == "call":
        call = LedgerCall("call-1", sid, "coder", "read_file", {"path": "a.py"}, "ide", "proposed")
        asked = [{"id": "call-1", "name": "read_file", "arguments": '{"path": "a.py"}'}]
        await Ledger(pool).propose(StoredMessage("assistant", "", tool_calls=asked), [call])
    else:
        await pool.execute(
            "insert into orchestrator.plans (plan_id, session_id, approval_request_id,"
            " call_id, planner, goal, steps, status)"
            " values ('p', $1, 'p', 'c', 'architect', 'g', '[]', 'running')",
            sid,
        )
    before = len(await store.history(sid))
    claim = Unclaimed("m-1", "user_message", False)
    user = StoredMessage("user", "never mind")
    ask = AgentAhead("ask", 1, "requested by the user", None, "explicit")
    start = await store.begin_turn(sid, None, [], claim, user=user, applies=("m-1", 2), ahead=ask)
    assert isinstance(start, TurnStart) and not start.stored
    assert (start.open_calls, start.running_plan) == (open_work == "call", open_work == "plan")
    assert (start.switched, start.pinned, start.session.current_agent) == (None, False, "coder")
    assert await switches(pool, sid) == []
    assert len(await store.history(sid)) == before
    assert await claim_row(pool, sid, "m-1") == (False, None)


async def test_a_tool_results_turn_start_reads_the_call_it_answers(pool: Pool) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("parent", "u1", "coder")
    await store.create_child("parent.call-d", "u1", "coder", "parent", "call-d")
    for sid, call_id in (("parent", "call-p"), ("parent.call-d", "call-c")):
        call = LedgerCall(call_id, sid, "coder", "read_file", {"path": "a.py"}, "ide", "proposed")
        asked = [{"id": call_id, "name": "read_file", "arguments": '{"path": "a.py"}'}]
        await ledger.propose(StoredMessage("assistant", "", tool_calls=asked), [call])
        await ledger.set_state(call, "dispatched", arguments={"path": "a.py"})
    for call_id in ("call-p", "call-c", "call-unknown"):  # its own, a delegate's, none
        start = await store.begin_turn("parent", None, [], None, call_id)
        assert isinstance(start, TurnStart) and start.call_id == call_id
        found = await ledger.find("parent", call_id)
        assert (None if start.call is None else LedgerCall(**start.call)) == found
        assert (found is None) == (call_id == "call-unknown")
    start = await store.begin_turn("parent", None, [])
    assert isinstance(start, TurnStart) and (start.call_id, start.call) == (None, None)


async def test_a_grouped_write_chosen_as_a_deadlocks_victim_is_written_again(
    pool: Pool, database_url: str
) -> None:
    """Another transaction holds one session's row and then wants another that the turn
    ends took first: Postgres rolls one back; the turn ends are written all the same."""
    store = SessionStore(pool)
    for sid in ("lock-a", "lock-b"):
        await store.attach(sid, "u1", "orchestrator")
        await store.begin_turn(sid, None, [])
    other = await asyncpg.connect(database_url)
    try:
        holding = other.transaction()
        await holding.start()
        touch = "update orchestrator.sessions set title = 'held' where session_id = $1"
        await other.execute(touch, "lock-b")  # the ends take lock-a first, then wait here
        ending = asyncio.gather(
            store.end_turn("lock-a", None, [], False, (1, 1)),
            store.end_turn("lock-b", None, [], False, (2, 2)),
        )
        await waits_for_a_lock(pool, "Messages are handled")
        try:
            await other.execute(touch, "lock-a")  # a cycle: one of the two is rolled back
        except asyncpg.DeadlockDetectedError:
            await holding.rollback()
        else:
            await holding.commit()
        await asyncio.wait_for(ending, 10)
    finally:
        await other.close()
    rows = await pool.fetch(
        "select session_id, turn_state, tool_tokens_offered from orchestrator.sessions"
        " where session_id like 'lock-%' order by session_id"
    )
    assert [tuple(r) for r in rows] == [("lock-a", "idle", 1), ("lock-b", "idle", 2)]


async def waits_for_a_lock(pool: Pool, statement: str) -> None:
    """Until a backend running ``statement`` (a piece of its text) waits for a row lock."""
    for _ in range(250):
        waiting = await pool.fetchval(
            "select count(*) from pg_stat_activity"
            " where wait_event_type = 'Lock' and position($1 in query) > 0",
            statement,
        )
        if waiting:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no statement with {statement!r} waited for a lock")


def statements_of(
    store: SessionStore, write: str, monkeypatch: pytest.MonkeyPatch
) -> list[list[str]]:
    """The sessions of each batch the store's grouped ``write`` gets from now on."""
    batches: list[list[str]] = []
    original = getattr(store.grouped, write)

    async def counted(rows: list[Any]) -> None:
        batches.append([row.session_id for row in rows])
        await original(rows)

    monkeypatch.setattr(store.grouped, write, counted)
    return batches
