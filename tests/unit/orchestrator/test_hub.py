"""The session hub over real Postgres: tokens that arrive during a commit join one event,
one commit numbers every session on its own, nothing reaches a subscriber before it is
committed, and a failed commit leaves no gap in the seq."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool
from services.common.errors import DatabaseError
from services.orchestrator.state import events
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import SessionStore, StoredMessage
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from tests.support.runtime import until

Stream = AsyncIterator[list[bytes]]


@pytest.fixture
async def store(pool: Pool) -> SessionStore:
    store = SessionStore(pool)
    for sid in ("a", "b"):
        await store.attach(sid, "u1", "orchestrator")
    return store


@pytest.fixture
async def hub(store: SessionStore) -> AsyncIterator[SessionHub]:
    hub = SessionHub(store)
    yield hub
    await hub.close()


async def logged(store: SessionStore, sid: str) -> list[pb.ServerEvent]:
    return [pb.ServerEvent.FromString(raw) for _, raw in await store.events_after(sid, 0, 1000)]


async def take(stream: Stream, count: int) -> list[pb.ServerEvent]:
    """The next ``count`` events a subscription delivers."""
    out: list[pb.ServerEvent] = []
    async with asyncio.timeout(5):
        while len(out) < count:
            out.extend(pb.ServerEvent.FromString(raw) for raw in await anext(stream))
    return out


async def next_batch(stream: Stream) -> list[bytes]:
    return await anext(stream)


async def waiting_live(hub: SessionHub, stream: Stream) -> asyncio.Task[list[bytes]]:
    """A read of ``stream`` parked on live events: one event of the session is delivered
    first, so the next read goes straight to the queue, without the log."""
    await hub.emit("a", answer("first"))
    await take(stream, 1)
    waiting = asyncio.create_task(next_batch(stream))
    await asyncio.sleep(0)
    return waiting


async def nothing_more(stream: Stream) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await anext(stream)


def answer(text: str) -> pb.ServerEvent:
    return events.assistant_content(text, "coder", "msg_1")


def shape(event: pb.ServerEvent) -> tuple[str, str, str]:
    """(type, message id, text) of a streamed or whole event."""
    kind = event.WhichOneof("event") or ""
    payload = getattr(event, kind)
    text = payload.token if kind == "reasoning" or payload.HasField("token") else payload.content
    return kind, payload.message_id, text


async def test_tokens_sent_before_the_commit_join_one_event(
    hub: SessionHub, store: SessionStore
) -> None:
    for piece in ("Hel", "lo", " world"):
        hub.token("a", piece, "coder", "msg_1")
    await hub.flush()
    [event] = await logged(store, "a")
    assert event.seq == 1 and event.session_id == "a" and event.timestamp
    message = event.assistant_message
    assert (message.token, message.is_final, message.agent) == ("Hello world", False, "coder")
    assert message.message_id == "msg_1"


async def test_another_answer_an_emit_or_reasoning_starts_a_new_event(
    hub: SessionHub, store: SessionStore
) -> None:
    hub.token("a", "x", "coder", "m1")
    hub.token("a", "y", "coder", "m2")
    hub.post("a", events.assistant_final("coder", "m2"))
    hub.token("a", "z", "coder", "m2")
    hub.reasoning("a", "r1", "coder", "m2")
    hub.reasoning("a", "r2", "coder", "m2")
    hub.token("a", "w", "coder", "m2")
    await hub.flush()
    assert [shape(e) for e in await logged(store, "a")] == [
        ("assistant_message", "m1", "x"),
        ("assistant_message", "m2", "y"),
        ("assistant_message", "m2", ""),
        ("assistant_message", "m2", "z"),
        ("reasoning", "m2", "r1r2"),
        ("assistant_message", "m2", "w"),
    ]


async def test_streamed_waits_for_the_commit_of_the_sessions_streamed_text(
    hub: SessionHub, store: SessionStore
) -> None:
    hub.token("a", "Whole answer.", "coder", "m1")
    hub.post("a", events.assistant_final("coder", "m1"), within=60)  # waits for company
    await hub.streamed("a")
    assert [shape(e) for e in await logged(store, "a")] == [
        ("assistant_message", "m1", "Whole answer."),
        ("assistant_message", "m1", ""),
    ]


async def test_streamed_commits_nothing_without_streamed_text(
    hub: SessionHub, store: SessionStore
) -> None:
    hub.post("b", answer("b1"), within=60)  # no streamed text of b: its commit may wait
    await asyncio.wait_for(hub.streamed("b"), 1)
    await asyncio.wait_for(hub.streamed("a"), 1)
    assert await logged(store, "b") == []
    await hub.flush()
    assert [e.seq for e in await logged(store, "b")] == [1]


async def test_streamed_waits_for_the_commit_in_flight(
    hub: SessionHub, store: SessionStore
) -> None:
    async def blocked() -> bool:
        waits = "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
        return bool(await store.pool.fetchval(waits))

    async with store.pool.acquire() as other, other.transaction():
        await other.execute("lock table orchestrator.events in exclusive mode")
        hub.token("a", "first", "coder", "m1")
        await until(blocked)  # its commit is in flight, waiting for the lock
        hub.post("a", answer("later"), within=60)  # the next batch: no streamed text
        waiting = asyncio.create_task(hub.streamed("a"))
        await asyncio.sleep(0.05)
        assert not waiting.done()
    await asyncio.wait_for(waiting, 5)
    assert [e.seq for e in await logged(store, "a")] == [1]  # "later" still waits


async def test_one_commit_numbers_each_session_on_its_own(
    hub: SessionHub, store: SessionStore
) -> None:
    hub.post("a", answer("a1"))
    hub.token("b", "b1", "ask", "m")
    hub.post("a", answer("a2"))
    hub.token("a", "a3", "coder", "m")
    hub.token("b", "more", "ask", "m")  # joins b's token although a's came between
    await hub.flush()
    a, b = await logged(store, "a"), await logged(store, "b")
    assert [(e.seq, shape(e)[2]) for e in a] == [(1, "a1"), (2, "a2"), (3, "a3")]
    assert [(e.seq, shape(e)[2]) for e in b] == [(1, "b1more")]
    assert (await hub.emit("a", answer("a4"))).seq == 4


async def test_concurrent_emits_share_a_commit_and_get_seqs_in_call_order(
    hub: SessionHub, store: SessionStore
) -> None:
    sent = await asyncio.gather(*(hub.emit("a", answer(str(n))) for n in range(30)))
    assert [e.seq for e in sent] == list(range(1, 31))
    stored = await logged(store, "a")
    assert [(e.seq, shape(e)[2]) for e in stored] == [(n + 1, str(n)) for n in range(30)]
    assert len({e.timestamp for e in stored}) == 1  # one commit stamps its whole batch


async def test_a_cancelled_emit_still_commits_and_keeps_its_place(
    hub: SessionHub, store: SessionStore
) -> None:
    first = asyncio.create_task(hub.emit("a", answer("first")))
    await asyncio.sleep(0)  # queued for the next commit
    first.cancel()
    assert (await hub.emit("a", answer("second"))).seq == 2
    assert [shape(e)[2] for e in await logged(store, "a")] == ["first", "second"]


def counted_commits(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of each commit the store makes from now on."""
    commits: list[int] = []
    append = store.append_events

    async def counting(*columns: list[object], **options: Any) -> None:
        commits.append(len(columns[0]))
        await append(*columns, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append_events", counting)
    return commits


@pytest.mark.parametrize("then", ["token", "emit", "flush"])
async def test_a_post_that_may_wait_shares_the_commit_of_what_follows(
    hub: SessionHub, store: SessionStore, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    commits = counted_commits(store, monkeypatch)
    hub.post("a", events.agent_switched("orchestrator", "coder", "asked"), within=30)
    await asyncio.sleep(0.05)
    assert commits == [] and await logged(store, "a") == []  # waiting for what follows
    async with asyncio.timeout(5):  # not the post's own 30 s
        if then == "token":
            hub.token("a", "Hi", "coder", "m")
            await hub.flush()
        elif then == "emit":
            await hub.emit("a", events.done("completed"))
        else:
            await hub.flush()
    kinds = [e.WhichOneof("event") for e in await logged(store, "a")]
    assert kinds == [
        "agent_switched",
        *{"token": ["assistant_message"], "emit": ["done"]}.get(then, []),
    ]
    assert commits == [len(kinds)]  # one commit for all of them


async def test_a_post_that_may_wait_commits_alone_when_nothing_follows(
    hub: SessionHub, store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = counted_commits(store, monkeypatch)
    hub.post("a", events.agent_switched("orchestrator", "coder", "asked"), within=0.01)

    async def committed() -> bool:
        return len(await logged(store, "a")) == 1

    await until(committed)
    assert commits == [1]
    assert (await hub.emit("a", answer("later"))).seq == 2
    assert commits == [1, 1]


async def test_next_seq_waits_for_pending_tokens(hub: SessionHub, store: SessionStore) -> None:
    hub.token("a", "t", "coder", "m")
    assert await hub.next_seq("a") == 2
    assert len(await logged(store, "a")) == 1
    assert await hub.next_seq("b") == 1


async def test_close_commits_what_waits(store: SessionStore) -> None:
    hub = SessionHub(store)
    hub.token("a", "last words", "coder", "m")
    await hub.close()
    assert [shape(e)[2] for e in await logged(store, "a")] == ["last words"]


async def test_the_seq_continues_after_what_another_replica_wrote(store: SessionStore) -> None:
    mine, other = SessionHub(store), SessionHub(store)
    try:
        assert (await mine.emit("a", answer("1"))).seq == 1
        assert (await other.emit("a", answer("2"))).seq == 2  # read from the log
        await mine.reset("a")
        assert (await mine.emit("a", answer("3"))).seq == 3
        assert (await other.emit("b", answer("b"))).seq == 1
        mine.forget("b")  # nobody watches b here: its seq is read again when needed
        assert (await mine.emit("b", answer("b2"))).seq == 2
    finally:
        await mine.close()
        await other.close()


async def test_an_adopted_seq_numbers_the_next_event_unless_a_commit_knows_better(
    store: SessionStore,
) -> None:
    mine, other = SessionHub(store), SessionHub(store)
    try:
        await other.emit("a", answer("1"))
        await other.emit("a", answer("2"))
        await mine.reset("a")
        mine.adopt("a", 2)  # what the take-over read of the log said
        assert (await mine.emit("a", answer("3"))).seq == 3
        mine.adopt("a", 1)  # an older read does not move a seq this process committed
        assert (await mine.emit("a", answer("4"))).seq == 4
        assert [e.seq for e in await logged(store, "a")] == [1, 2, 3, 4]
        mine.adopt("b", 7)  # taken as is: the log is not read again (it says 0)
        assert (await mine.emit("b", answer("b"))).seq == 8
    finally:
        await mine.close()
        await other.close()


async def test_a_conflicting_commit_fails_then_the_seq_is_read_again(store: SessionStore) -> None:
    mine, other = SessionHub(store), SessionHub(store)
    try:
        await mine.emit("a", answer("1"))
        sub = await mine.subscribe("a", 1)
        await other.emit("a", answer("2"))
        with pytest.raises(DatabaseError) as failed:
            await mine.emit("a", answer("stale"))  # numbered 2 from a stale cache
        assert failed.value.code == "DB_WRITE_ERROR"
        assert sub.queue.empty()  # nothing uncommitted was delivered
        assert (await mine.emit("a", answer("3"))).seq == 3
        assert [shape(e)[2] for e in await logged(store, "a")] == ["1", "2", "3"]
    finally:
        await mine.close()
        await other.close()


async def test_a_failed_commit_fails_every_event_of_its_batch(
    hub: SessionHub, store: SessionStore
) -> None:
    sub = await hub.subscribe("a", 0)
    batch = hub.post("a", answer("lost"))
    with pytest.raises(DatabaseError):
        await hub.emit("ghost", answer("no such session"))  # its insert fails the batch
    assert isinstance(batch.committed.exception(), DatabaseError)
    assert await logged(store, "a") == []
    assert sub.queue.empty()
    assert (await hub.emit("a", answer("kept"))).seq == 1  # no gap


async def test_a_subscriber_gets_its_sessions_events_in_seq_order(hub: SessionHub) -> None:
    stream = aiter(await hub.subscribe("a", 0))
    await hub.emit("a", answer("1"))
    await hub.emit("b", answer("not mine"))
    hub.token("a", "2", "coder", "m")
    await hub.emit("a", events.done())
    got = await take(stream, 3)
    assert [(e.seq, e.WhichOneof("event")) for e in got] == [
        (1, "assistant_message"),
        (2, "assistant_message"),
        (3, "done"),
    ]
    await nothing_more(stream)


async def test_a_late_subscriber_replays_the_log_then_follows(hub: SessionHub) -> None:
    for n in range(3):
        await hub.emit("a", answer(str(n)))
    stream = aiter(await hub.subscribe("a", 1))
    assert [e.seq for e in await take(stream, 2)] == [2, 3]
    await hub.emit("a", answer("live"))
    assert [(e.seq, shape(e)[2]) for e in await take(stream, 1)] == [(4, "live")]


async def test_a_negative_after_means_only_new_events(hub: SessionHub) -> None:
    await hub.emit("a", answer("old"))
    stream = aiter(await hub.subscribe("a", -1))
    await hub.emit("a", answer("new"))
    assert [(e.seq, shape(e)[2]) for e in await take(stream, 1)] == [(2, "new")]


@pytest.mark.parametrize("replay", [False, True])
async def test_a_watch_started_from_a_later_read_gets_each_later_event_once(
    hub: SessionHub, store: SessionStore, replay: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new stream's subscription is registered before the attach's statement reads the
    log's last seq: a commit in between is queued and skipped, every later one delivered,
    and the log is read only when asked to (a resuming client)."""
    await hub.emit("a", answer("old"))
    reads: list[int] = []
    events_after = store.events_after

    async def counted(sid: str, after: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        reads.append(after)
        return await events_after(sid, after, limit)

    monkeypatch.setattr(store, "events_after", counted)
    sub = hub.watch("a")
    await hub.emit("a", answer("between"))  # committed after the watch, before the read
    attached = await store.attach("a", "u1", "orchestrator")
    assert attached.last_seq == 2
    sub.start_after(attached.last_seq, replay=replay)
    await hub.emit("a", answer("new"))
    stream = aiter(sub)
    assert [(e.seq, shape(e)[2]) for e in await take(stream, 1)] == [(3, "new")]
    await nothing_more(stream)
    assert reads == ([2] if replay else [])


async def test_a_subscriber_that_fell_behind_reads_the_rest_from_the_log(
    store: SessionStore,
) -> None:
    hub = SessionHub(store, queue_size=2)
    try:
        sub = await hub.subscribe("a", 0)
        stream = aiter(sub)
        waiting = await waiting_live(hub, stream)
        for n in range(7):
            hub.post("a", answer(str(n)))
        await hub.flush()  # one commit offers 7 events to a queue of 2
        assert sub.lagged
        seen = [pb.ServerEvent.FromString(raw).seq for raw in await waiting]
        seen += [e.seq for e in await take(stream, 7 - len(seen))]
        assert seen == list(range(2, 9))
        await nothing_more(stream)
    finally:
        await hub.close()


async def test_a_told_event_reaches_subscribers_without_being_logged(
    hub: SessionHub, store: SessionStore
) -> None:
    first, second = await hub.subscribe("a", 0), await hub.subscribe("a", 0)
    hub.tell("a", events.refused("DB_WRITE_ERROR", "postgres is away", "c1"))
    hub.tell("a", events.done("error"), only=second)
    [refusal] = await take(aiter(first), 1)
    assert (refusal.seq, refusal.session_id) == (0, "a")
    assert refusal.error.client_message_id == "c1"
    assert [e.WhichOneof("event") for e in await take(aiter(second), 2)] == ["error", "done"]
    assert await logged(store, "a") == []


async def test_a_nudge_delivers_what_another_replica_committed(store: SessionStore) -> None:
    mine, other = SessionHub(store), SessionHub(store)
    try:
        stream = aiter(await mine.subscribe("a", 0))
        waiting = await waiting_live(mine, stream)
        await other.emit("a", answer("elsewhere"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # this process did not commit it: no delivery yet
        mine.nudge("a", 2)
        async with asyncio.timeout(5):
            batch = await waiting
        assert [shape(pb.ServerEvent.FromString(raw))[2] for raw in batch] == ["elsewhere"]
    finally:
        await mine.close()
        await other.close()


async def test_end_stops_after_what_is_queued_and_close_stops_delivery(hub: SessionHub) -> None:
    sub = await hub.subscribe("a", 0)
    await hub.emit("a", answer("1"))
    sub.end()
    batches = [batch async for batch in sub]
    assert [pb.ServerEvent.FromString(raw).seq for batch in batches for raw in batch] == [1]
    other = await hub.subscribe("a", 1)
    other.close()
    await hub.emit("a", answer("2"))
    assert other.queue.empty()


async def _state(store: SessionStore, call_id: str) -> tuple[str, object]:
    row = await store.pool.fetchrow(
        "select state, arguments from orchestrator.tool_calls where call_id = $1", call_id
    )
    assert row is not None
    return row["state"], row["arguments"]


async def test_events_and_the_call_they_send_are_one_commit(
    hub: SessionHub, store: SessionStore
) -> None:
    """``emit_all``: the events in order under one commit, and the call's new state and
    validated arguments with them; a commit that fails keeps neither."""
    ledger = Ledger(store.pool)
    sending = [
        events.tool_call(
            "call-1",
            "read_file",
            {"path": "a.py"},
            requires_approval=False,
            reason=None,
            agent="coder",
        ),
        events.done("awaiting_tool_result"),
    ]
    sent = LedgerCall("call-1", "a", "coder", "read_file", '{"path": "a.py"}', "", "proposed")
    asked = [{"id": "call-1", "name": "read_file", "arguments": sent.arguments}]
    await ledger.propose(StoredMessage("assistant", "", tool_calls=asked), [sent])
    lost = hub.post("ghost", answer("no such session"))  # fails the batch it shares
    with pytest.raises(DatabaseError):
        await hub.emit_all(
            "a",
            sending,
            [ledger.dispatching(sent, {"path": "a.py"})],
        )
    assert isinstance(lost.committed.exception(), DatabaseError)
    assert await _state(store, "call-1") == ("proposed", '{"path": "a.py"}')
    assert await logged(store, "a") == []
    stream = aiter(await hub.subscribe("a", 0))
    await hub.emit_all(
        "a",
        sending,
        [ledger.dispatching(sent, {"path": "a.py"})],
    )
    assert await _state(store, "call-1") == ("dispatched", {"path": "a.py"})
    delivered = await take(stream, 2)
    assert [(e.seq, e.WhichOneof("event")) for e in delivered] == [(1, "tool_call"), (2, "done")]
    assert [e.seq for e in await logged(store, "a")] == [1, 2]
