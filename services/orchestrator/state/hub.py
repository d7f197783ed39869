"""Per-session event sequencing, group commit, fan-out and replay.

One writer per process commits the events of every session it serves: while one commit
is in flight the next events gather, and the writer then numbers them (``seq``,
per session), commits them in one multi-row INSERT and only then hands them to the
subscribers, in seq order. A commit is shared by every session that waits on it, so
its cost is paid once per batch, not once per token. Streamed text (or reasoning) that
arrives while a commit is in flight joins the session's pending token (or reasoning)
event of the same ``message_id``: the IDE gets fewer, larger tokens with the same text.
Nothing reaches a client before it is committed, so a subscriber that falls behind (or
attaches late) fills any gap from the database: nothing is lost or doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from codelab.v1 import common_pb2 as pb
from services.common.errors import ServiceError
from services.orchestrator.state.store import CallChange, SessionStore

log = logging.getLogger(__name__)

REPLAY_PAGE = 500


@dataclass(slots=True)
class _Row:
    """One event waiting for its commit; a token event may still grow."""

    session_id: str
    event: pb.ServerEvent
    parts: list[str] | None = None
    """Text of a token event, joined at commit (appending to a proto string is quadratic)."""
    kind: str = ""
    """``assistant_message`` or ``reasoning`` for a streamed row: the payload ``parts`` fill."""


@dataclass
class _Batch:
    """The events that will share the next commit."""

    rows: list[_Row] = field(default_factory=list)
    tokens: dict[str, _Row] = field(default_factory=dict)
    """The session's last row when it is a token event that may still grow."""
    streamed: set[str] = field(default_factory=set)
    """Sessions with streamed text or reasoning in the batch."""
    changes: list[CallChange] = field(default_factory=list)
    """Tool calls' state changes the batch's commit carries (``emit_all``)."""
    committed: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Subscription:
    """One client's view of a session's events, from ``after`` onwards, as serialized
    events in seq order, in batches of what was ready at once."""

    def __init__(self, hub: SessionHub, session_id: str, after: int, size: int) -> None:
        self.hub = hub
        self.session_id = session_id
        self.last = after
        self.replay = True
        """Read the log after ``last`` before the first queued event (see ``start_after``)."""
        # (seq, serialized event); no event: a nudge, the events are in the log.
        # Seq 0: an event outside the log (see ``SessionHub.tell``), delivered as it comes.
        self.queue: asyncio.Queue[tuple[int, bytes | None]] = asyncio.Queue(maxsize=size)
        self.lagged = False
        self.closed = False

    def start_after(self, seq: int, *, replay: bool) -> None:
        """Deliver the events after ``seq``. ``replay`` False: ``seq`` is the log's last
        seq read after this subscription was registered (``SessionHub.watch``), so every
        later commit is offered or nudged to it and the log has nothing to add."""
        self.last = seq
        self.replay = replay

    def nudge(self, seq: int) -> None:
        """Another replica committed up to ``seq``: read it from the log when behind."""
        if seq > self.last:
            self.offer(seq, None)

    def offer(self, seq: int, event: bytes | None) -> None:
        try:
            self.queue.put_nowait((seq, event))
        except asyncio.QueueFull:
            # The events are in Postgres; the subscriber re-reads them when it catches up.
            self.lagged = True

    def end(self) -> None:
        """Stop the iteration after what is queued (the stream is ending)."""
        self.closed = True
        self.offer(0, None)

    async def _replay(self, upto: int | None) -> AsyncIterator[list[bytes]]:
        """Pages of committed events after ``last`` (and before ``upto``)."""
        while upto is None or self.last < upto - 1:
            rows = await self.hub.store.events_after(self.session_id, self.last, REPLAY_PAGE)
            page = [raw for seq, raw in rows if upto is None or seq < upto]
            if page:
                self.last = rows[len(page) - 1][0]
                yield page
            if len(rows) < REPLAY_PAGE or len(page) < len(rows):
                return

    async def __aiter__(self) -> AsyncIterator[list[bytes]]:
        if self.replay:
            async for page in self._replay(None):
                yield page
        while not self.closed:
            if self.lagged and self.queue.empty():
                self.lagged = False
                async for page in self._replay(None):
                    yield page
                continue
            items = [await self.queue.get()]
            while not self.queue.empty() and len(items) < REPLAY_PAGE:
                items.append(self.queue.get_nowait())
            ready: list[bytes] = []
            for seq, event in items:
                if seq <= 0:
                    if event is not None:
                        ready.append(event)
                    continue
                if seq <= self.last:
                    continue
                if event is None or seq > self.last + 1:  # a nudge or a gap: read the log
                    if ready:
                        yield ready
                        ready = []
                    async for page in self._replay(None if event is None else seq):
                        yield page
                    if event is None or seq <= self.last:
                        continue
                self.last = seq
                ready.append(event)
            if ready:
                yield ready

    def close(self) -> None:
        self.closed = True
        self.hub.unsubscribe(self)


FOLLOWED_WAIT = 0.005
"""Seconds an event that other events follow at once may wait to share their commit: an
``agent_switched`` (a turn's first token, or the ``done`` after the switch back at a task's
end follows it) and an answer's final ``assistant_message`` (its turn's ``done``, or its
tool calls). A commit and a WAL flush less each, and no commit in flight when the first
token comes."""


class SessionHub:
    """Owns ``seq`` for the sessions this process serves, and their one writer."""

    def __init__(self, store: SessionStore, queue_size: int = 10_000) -> None:
        self.store = store
        self.queue_size = queue_size
        self._seq: dict[str, int] = {}
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)
        self._pending: _Batch | None = None
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._due: asyncio.TimerHandle | None = None
        """The wake of the writer that a ``post`` with ``within`` put off."""
        self.notify = True
        """Commits notify other replicas' subscribers (False while no other replica is
        alive: session/presence.py)."""
        self._inflight: _Batch | None = None

    def _batch(self, wake: bool = True) -> _Batch:
        """The batch the next commit takes; ``wake``: commit it as soon as the writer can
        (else someone wakes the writer later)."""
        if self._pending is None:
            self._pending = _Batch()
            if self._writer is None or self._writer.done():
                self._writer = asyncio.create_task(self._write(), name="event-writer")
        if wake:
            self._wake.set()
        return self._pending

    async def emit(self, session_id: str, event: pb.ServerEvent) -> pb.ServerEvent:
        """Commit and deliver ``event``; returns it with seq and timestamp set.

        A caller cancelled while it waits does not take its event back: the batch
        commits anyway and the seq stays in order.
        """
        batch = self.post(session_id, event)
        await asyncio.shield(batch.committed)
        return event

    async def emit_all(
        self,
        session_id: str,
        events: Sequence[pb.ServerEvent],
        changes: Sequence[CallChange] = (),
    ) -> None:
        """Commit and deliver ``events`` in one commit, in order, and with them the tool
        calls' ``changes``: the events are never committed without them, nor they without
        the events (as ``emit``, a cancelled caller does not take them back)."""
        batch = self._batch()
        for event in events:
            self.post(session_id, event)
        batch.changes.extend(changes)
        await asyncio.shield(batch.committed)

    def post(
        self, session_id: str, event: pb.ServerEvent, *, within: float | None = None
    ) -> _Batch:
        """Queue ``event`` for the next commit without waiting for it. ``within``: its
        commit may wait up to that many seconds for the events that follow it (the next
        token, ``emit`` or ``flush`` commits it with them: one commit, not two)."""
        batch = self._batch(wake=within is None)
        if within is not None and not self._wake.is_set() and self._due is None:
            self._due = asyncio.get_running_loop().call_later(within, self._wake_writer)
        batch.tokens.pop(session_id, None)
        batch.rows.append(_Row(session_id, event))
        return batch

    def _wake_writer(self) -> None:
        self._due = None
        self._wake.set()

    def token(self, session_id: str, text: str, agent: str, message_id: str) -> None:
        """Stream ``text`` of answer ``message_id`` without waiting for its commit: it
        joins the session's pending token event when one is still open. The next
        ``emit`` of the session (or ``flush``) waits for it."""
        self._stream(session_id, "assistant_message", text, agent, message_id)

    def reasoning(self, session_id: str, text: str, agent: str, message_id: str) -> None:
        """Stream the model's reasoning for answer ``message_id`` as ``token`` streams its
        text: pieces that arrive while a commit is in flight join one ``reasoning`` event."""
        self._stream(session_id, "reasoning", text, agent, message_id)

    def _stream(self, session_id: str, kind: str, text: str, agent: str, message_id: str) -> None:
        batch = self._batch()
        open_row = batch.tokens.get(session_id)
        if open_row is not None and open_row.kind == kind:
            payload = getattr(open_row.event, kind)
            if payload.message_id == message_id:
                assert open_row.parts is not None
                open_row.parts.append(text)
                return
        if kind == "reasoning":
            event = pb.ServerEvent(reasoning=pb.Reasoning(agent=agent, message_id=message_id))
        else:
            event = pb.ServerEvent(
                assistant_message=pb.AssistantMessage(
                    is_final=False, agent=agent, message_id=message_id
                )
            )
        row = _Row(session_id, event, [text], kind)
        batch.rows.append(row)
        batch.tokens[session_id] = row
        batch.streamed.add(session_id)

    async def flush(self) -> None:
        """Wait until everything emitted so far is committed."""
        if self._pending is not None:
            self._wake.set()
            await asyncio.shield(self._pending.committed)

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._due is not None:
                self._due.cancel()
                self._due = None
            batch, self._pending = self._pending, None
            if batch is None:
                continue
            self._inflight = batch
            try:
                await self._commit(batch)
            except ServiceError as error:
                batch.committed.set_exception(error)
                batch.committed.exception()  # retrieved: a batch nobody awaited logs nothing
            except BaseException as error:
                if not batch.committed.done():
                    batch.committed.set_exception(error)
                    batch.committed.exception()
                raise
            else:
                batch.committed.set_result(None)
            finally:
                self._inflight = None

    async def streamed(self, session_id: str) -> None:
        """Wait for the commit that carries the session's streamed text (or reasoning) to
        its subscribers, waiting or in flight (a failed one too: its emitter hears of it);
        at once when none does (streamed text wakes the writer: it is never put off). An
        answer's bookkeeping waits here, so that its statements do not share the cores with
        the commit its client is waiting for."""
        for batch in (self._pending, self._inflight):
            if batch is not None and session_id in batch.streamed:
                await asyncio.wait([batch.committed])
                return

    async def settled(self) -> None:
        """Wait for the commit in flight, if any, to end (``notify`` may have changed since
        its statement was built; every later one is built with the new value)."""
        if self._inflight is not None:
            await asyncio.wait([self._inflight.committed])

    async def _commit(self, batch: _Batch) -> None:
        rows = batch.rows
        sessions = {row.session_id for row in rows}
        missing = [sid for sid in sessions if sid not in self._seq]
        if missing:
            self._seq.update(await self.store.last_seqs(missing))
        numbered = dict.fromkeys(sessions, 0)
        for sid in sessions:
            numbered[sid] = self._seq[sid]
        stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        ids, seqs, kinds, blobs = [], [], [], []
        for row in rows:
            event = row.event
            if row.parts is not None:
                getattr(event, row.kind).token = "".join(row.parts)
            seq = numbered[row.session_id] + 1
            numbered[row.session_id] = seq
            event.session_id = row.session_id
            event.seq = seq
            event.timestamp = stamp
            ids.append(row.session_id)
            seqs.append(seq)
            kinds.append(event.WhichOneof("event") or "")
            blobs.append(event.SerializeToString())
        try:
            await self.store.append_events(
                ids, seqs, kinds, blobs, notify=self.notify, changes=batch.changes
            )
        except BaseException:
            # Maybe committed, maybe not (a lost connection cannot tell): read it again.
            for sid in sessions:
                self._seq.pop(sid, None)
            raise
        self._seq.update(numbered)
        for row, seq, blob in zip(rows, seqs, blobs, strict=True):
            for subscriber in tuple(self._subscribers.get(row.session_id, ())):
                subscriber.offer(seq, blob)

    async def subscribe(self, session_id: str, after: int) -> Subscription:
        """Events with seq > ``after``; a negative ``after`` means only new ones."""
        if after < 0:
            after = await self.next_seq(session_id) - 1
        subscription = self.watch(session_id)
        subscription.start_after(after, replay=True)
        return subscription

    def watch(self, session_id: str) -> Subscription:
        """A subscription registered now, whose start the caller sets before reading it
        (``Subscription.start_after``): what commits meanwhile waits in its queue."""
        subscription = Subscription(self, session_id, -1, self.queue_size)
        self._subscribers[session_id].add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """``subscription`` hears nothing more."""
        self._subscribers[subscription.session_id].discard(subscription)

    def tell(
        self, session_id: str, event: pb.ServerEvent, only: Subscription | None = None
    ) -> None:
        """Deliver ``event`` to this process's subscribers of the session (or ``only``)
        without committing it (seq 0): how a client hears that its message was not
        accepted while Postgres, which every logged event needs, does not answer."""
        event.session_id = session_id
        event.seq = 0
        event.timestamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        blob = event.SerializeToString()
        for subscriber in (only,) if only else tuple(self._subscribers.get(session_id, ())):
            subscriber.offer(0, blob)

    async def next_seq(self, session_id: str) -> int:
        """The seq the session's next event will get (everything emitted so far committed)."""
        await self.flush()
        if session_id not in self._seq:
            self._seq.update(await self.store.last_seqs([session_id]))
        return self._seq[session_id] + 1

    def nudge(self, session_id: str, seq: int) -> None:
        """Events up to ``seq`` were committed elsewhere; wake this process's subscribers."""
        for subscriber in tuple(self._subscribers.get(session_id, ())):
            subscriber.nudge(seq)

    async def reset(self, session_id: str) -> None:
        """Forget the cached seq: another replica may have written since. Events already
        waiting are numbered from the log at their commit."""
        await self.flush()
        self._seq.pop(session_id, None)

    def adopt(self, session_id: str, last_seq: int) -> None:
        """``last_seq``: the log's last seq, read by this process after it took the session
        over and ``reset`` it; kept unless a commit since then numbered from the log (it
        read the same or later)."""
        self._seq.setdefault(session_id, last_seq)

    def forget(self, session_id: str) -> None:
        """Drop cached state of a session nobody watches (its events stay in Postgres)."""
        if not self._subscribers.get(session_id):
            self._subscribers.pop(session_id, None)
            self._seq.pop(session_id, None)

    async def close(self) -> None:
        """Commit what waits, then stop the writer."""
        with contextlib.suppress(ServiceError):
            await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
