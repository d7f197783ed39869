"""The ledger's two writes of a tool round trip, one commit each: the model's answer with the
calls it proposes (in order, in the running plan's step), and a finished call (the tool
message the model reads, the call's state and result, the sources and artifacts it left, and
the session's next open call, read by the same statement)."""

from __future__ import annotations

import dataclasses

from asyncpg import Pool

from services.orchestrator.state.store import SessionStore, StoredMessage
from services.orchestrator.turn.ledger import Ledger, LedgerCall, Plan


async def proposed(ledger: Ledger, sid: str, call_id: str, tool: str) -> LedgerCall:
    call = LedgerCall(call_id, sid, "coder", tool, '{"path": "a.py"}', "", "proposed")
    asked = {"id": call_id, "name": tool, "arguments": call.arguments}
    await ledger.propose(StoredMessage("assistant", "", tool_calls=[asked]), [call])
    return call


async def test_a_finished_call_is_its_message_state_and_records_together(pool: Pool) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("done-call", "u1", "coder")
    call = await proposed(ledger, "done-call", "call-1", "apply_patch")
    message = StoredMessage("tool", "patched", name="apply_patch", tool_call_id="call-1")
    await ledger.complete(
        call,
        message,
        "completed",
        {"content": "patched", "exit": 0},
        [("file", "a.py")],
        [("patch", "a.py", 12), ("patch", "b.py", 12), ("patch", "a.py", 12)],
    )
    [_, stored] = await store.context("done-call")
    assert (stored.role, stored.content, stored.name, stored.tool_call_id) == (
        "tool",
        "patched",
        "apply_patch",
        "call-1",
    )
    assert stored.tokens == message.token_count > 0
    finished = await ledger.get("done-call", "call-1")
    assert finished is not None and finished.state == "completed"
    result = await pool.fetchval(
        "select result from orchestrator.tool_calls where call_id = 'call-1'"
    )
    assert result == {"content": "patched", "exit": 0}
    sources = await pool.fetch(
        "select kind, locator from orchestrator.sources where call_id = 'call-1'"
    )
    assert [tuple(r) for r in sources] == [("file", "a.py")]
    artifacts = await pool.fetch(
        "select path, bytes from orchestrator.artifacts where call_id = 'call-1' order by id"
    )
    assert [tuple(r) for r in artifacts] == [("a.py", 12), ("b.py", 12)]  # a path once


async def test_a_call_that_left_nothing_writes_no_records(pool: Pool) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("failed-call", "u1", "coder")
    call = await proposed(ledger, "failed-call", "call-2", "read_file")
    await ledger.complete(call, StoredMessage("tool", "Error: no such file"), "failed", None)
    finished = await ledger.get("failed-call", "call-2")
    assert finished is not None and finished.state == "failed"
    counts = await pool.fetchrow(
        "select (select count(*) from orchestrator.sources where call_id = 'call-2') as s,"
        " (select count(*) from orchestrator.artifacts where call_id = 'call-2') as a,"
        " (select count(*) from orchestrator.messages where session_id = 'failed-call') as m"
    )
    assert tuple(counts) == (0, 0, 2)  # the answer that called it, and its result


async def test_an_answer_and_its_calls_are_proposed_in_order_in_the_running_step(
    pool: Pool,
) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("planned", "u1", "coder")
    steps = [{"id": "s1", "desc": "look"}, {"id": "s2", "desc": "fix"}]
    plan = Plan("plan-1", "planned", "req-1", "call-0", "architect", "fix it", steps, "running")
    await ledger.create_plan(plan)
    plan.current_step = 1
    await ledger.save_plan(plan)
    calls = [
        LedgerCall(f"call-{n}", "planned", "coder", tool, '{"path": "a.py"}', "", "proposed")
        for n, tool in ((9, "read_file"), (3, "write_file"), (5, "list_files"))
    ]
    asked = [{"id": c.call_id, "name": c.tool_name, "arguments": c.arguments} for c in calls]
    answer = StoredMessage("assistant", "Looking.", name="coder", tool_calls=asked)
    returned = await ledger.propose(answer, calls)
    stored = await ledger.open_calls("planned")
    assert returned == stored  # as stored: the loop runs the first without reading it
    assert [c.call_id for c in stored] == ["call-9", "call-3", "call-5"]
    assert {(c.plan_id, c.step_id, c.state, c.agent) for c in stored} == {
        ("plan-1", "s2", "proposed", "coder")
    }
    assert stored[0].arguments == '{"path": "a.py"}'
    [message] = await store.context("planned")
    assert (message.content, message.name, message.tool_calls) == ("Looking.", "coder", asked)


async def test_calls_outside_a_plan_belong_to_none(pool: Pool) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("unplanned", "u1", "coder")
    call = await proposed(ledger, "unplanned", "call-u", "read_file")
    stored = await ledger.get("unplanned", call.call_id)
    assert stored is not None and (stored.plan_id, stored.step_id) == (None, None)


async def test_a_finished_calls_commit_tells_the_next_open_call(pool: Pool) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("next", "u1", "coder")
    calls = [
        LedgerCall(f"call-{n}", "next", "coder", "read_file", '{"path": "a.py"}', "", "proposed")
        for n in ("a", "b")
    ]
    asked = [{"id": c.call_id, "name": c.tool_name, "arguments": c.arguments} for c in calls]
    await ledger.propose(StoredMessage("assistant", "", tool_calls=asked), calls)
    await ledger.complete(calls[0], StoredMessage("tool", "A"), "completed", None)
    # Behind the ledger's back: what it answers next was read by the commit, not after it.
    await pool.execute(
        "update orchestrator.tool_calls set state = 'failed' where call_id = 'call-b'"
    )
    after = await ledger.next_open("next")
    assert after is not None and (after.call_id, after.state) == ("call-b", "proposed")
    assert await ledger.next_open("next") is None  # answered once, then read


async def test_the_next_open_call_is_read_again_after_a_change_or_the_handling_ends(
    pool: Pool,
) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("again", "u1", "coder")
    calls = [
        LedgerCall(f"call-{n}", "again", "coder", "read_file", '{"path": "a.py"}', "", "proposed")
        for n in ("x", "y", "z")
    ]
    asked = [{"id": c.call_id, "name": c.tool_name, "arguments": c.arguments} for c in calls]
    await ledger.propose(StoredMessage("assistant", "", tool_calls=asked), calls)
    await ledger.complete(calls[0], StoredMessage("tool", "X"), "completed", None)
    await ledger.set_state(calls[1], "dispatched")
    after = await ledger.next_open("again")
    assert after is not None and (after.call_id, after.state) == ("call-y", "dispatched")
    await ledger.complete(calls[1], StoredMessage("tool", "Y"), "completed", None)
    ledger.forget("again")  # another owner may change the calls once this handling ends
    await pool.execute(
        "update orchestrator.tool_calls set state = 'failed' where call_id = 'call-z'"
    )
    assert await ledger.next_open("again") is None
    await ledger.complete(calls[2], StoredMessage("tool", "Z"), "completed", None)
    assert await ledger.next_open("again") is None  # the last one: none is open


async def test_the_last_open_calls_commit_reads_what_the_next_model_call_reads(
    pool: Pool,
) -> None:
    """``read_context``: the history and hand-over context exactly as ``turn_context``
    reads them after the commit (its tool message, its failure as the last error, the
    files it wrote), and only once no call of the session is open."""
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("reads", "u1", "coder")
    await store.set_context_metadata("reads", {"user_preferences": "tabs"})
    calls = [
        LedgerCall(f"call-{n}", "reads", "coder", "write_file", '{"path": "a.py"}', "", "proposed")
        for n in ("p", "q")
    ]
    asked = [{"id": c.call_id, "name": c.tool_name, "arguments": c.arguments} for c in calls]
    await ledger.propose(StoredMessage("assistant", "", tool_calls=asked), calls)
    first = StoredMessage("tool", "written", name="write_file", tool_call_id="call-p")
    artifacts = [("file", "src/a.py", 3)]
    # Another call is open: nothing is read, whatever is asked.
    assert (
        await ledger.complete(calls[0], first, "completed", None, [], artifacts, read_context=True)
        is None
    )
    last = StoredMessage("tool", "Error: disk full", name="write_file", tool_call_id="call-q")
    read = await ledger.complete(
        calls[1], last, "failed", {"content": "Error: disk full"}, read_context=True
    )
    assert read is not None
    history, handover = read
    expected = await store.turn_context("reads")
    assert [dataclasses.asdict(m) for m in history] == [dataclasses.asdict(m) for m in expected[0]]
    assert [(m.role, m.content) for m in history][-2:] == [
        ("tool", "written"),
        ("tool", "Error: disk full"),
    ]
    assert handover == expected[1]
    assert handover["last_error"] == "Error: disk full"
    assert handover["files_modified"] == ["src/a.py"]
    assert handover["metadata"] == {"user_preferences": "tabs"}
    assert await ledger.next_open("reads") is None
    # Not asked: not read.
    again = await proposed(ledger, "reads", "call-r", "read_file")
    assert await ledger.complete(again, StoredMessage("tool", "x"), "completed", None) is None


async def test_a_turn_begun_without_a_running_plan_reads_none_until_a_plan_is_written(
    pool: Pool,
) -> None:
    store, ledger = SessionStore(pool), Ledger(pool)
    await store.attach("planless", "u1", "coder")
    steps = [{"id": "s1", "desc": "look"}]
    plan = Plan("plan-p", "planless", "req-p", "call-p", "architect", "look", steps, "running")
    await ledger.create_plan(plan)  # awaiting approval
    await ledger.save_plan(plan)  # approved: running
    ledger.no_running_plan("planless")  # as a turn that began before the approval would say
    assert await ledger.running_plan("planless") is None  # not read
    await ledger.save_plan(plan)  # a plan written here: read again
    running = await ledger.running_plan("planless")
    assert running is not None and running.plan_id == "plan-p"
    ledger.no_running_plan("planless")
    ledger.forget("planless")  # the handling ended: read again
    assert await ledger.running_plan("planless") is not None
