"""Per-session event sequencing, commit, fan-out and replay.

An event gets the session's next ``seq``, is committed to Postgres, and only then
reaches subscribers, all under the session's lock so every subscriber sees seq
order. Because everything sent is committed, a subscriber that falls behind (or
attaches late) fills any gap from the database: nothing is lost or doubled.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import defaultdict
from collections.abc import AsyncIterator

from codelab.v1 import common_pb2 as pb
from services.orchestrator.events import kind
from services.orchestrator.store import SessionStore

REPLAY_PAGE = 500


class Subscription:
    """One client's view of a session's events, from ``after`` onwards."""

    def __init__(self, hub: SessionHub, session_id: str, after: int, size: int) -> None:
        self.hub = hub
        self.session_id = session_id
        self.last = after
        self.queue: asyncio.Queue[pb.ServerEvent] = asyncio.Queue(maxsize=size)
        self.lagged = False
        self.closed = False

    def nudge(self, seq: int) -> None:
        """Another replica committed up to ``seq``: read it from the log when behind."""
        if seq > self.last:
            self.offer(pb.ServerEvent(seq=seq))

    def offer(self, event: pb.ServerEvent) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # The events are in Postgres; the subscriber re-reads them when it catches up.
            self.lagged = True

    async def _replay(self, upto: int | None) -> AsyncIterator[pb.ServerEvent]:
        while upto is None or self.last < upto - 1:
            rows = await self.hub.store.events_after(self.session_id, self.last, REPLAY_PAGE)
            for seq, raw in rows:
                if upto is not None and seq >= upto:
                    return
                event = pb.ServerEvent.FromString(raw)
                self.last = seq
                yield event
            if len(rows) < REPLAY_PAGE:
                return

    async def __aiter__(self) -> AsyncIterator[pb.ServerEvent]:
        async for event in self._replay(None):
            yield event
        while not self.closed:
            if self.lagged and self.queue.empty():
                self.lagged = False
                async for event in self._replay(None):
                    yield event
                continue
            event = await self.queue.get()
            if event.seq <= self.last:
                continue
            if event.WhichOneof("event") is None:  # a nudge: the events are in the log
                async for missed in self._replay(None):
                    yield missed
                continue
            if event.seq > self.last + 1:
                async for missed in self._replay(event.seq):
                    yield missed
            self.last = event.seq
            yield event

    def close(self) -> None:
        self.closed = True
        self.hub._subscribers[self.session_id].discard(self)


class SessionHub:
    """Owns ``seq`` for the sessions this process serves."""

    def __init__(self, store: SessionStore, queue_size: int = 10_000) -> None:
        self.store = store
        self.queue_size = queue_size
        self._seq: dict[str, int] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)

    async def _current(self, session_id: str) -> int:
        if session_id not in self._seq:
            self._seq[session_id] = await self.store.last_seq(session_id)
        return self._seq[session_id]

    async def emit(self, session_id: str, event: pb.ServerEvent) -> pb.ServerEvent:
        """Sequence, commit and deliver ``event``; returns it with seq and timestamp set.

        Shielded: a turn cancelled mid-emit must not leave an event committed but its seq
        unrecorded (the next event would reuse it); the emit finishes, the caller is cancelled.
        """
        return await asyncio.shield(self._emit(session_id, event))

    async def _emit(self, session_id: str, event: pb.ServerEvent) -> pb.ServerEvent:
        async with self._locks[session_id]:
            seq = await self._current(session_id) + 1
            event.session_id = session_id
            event.seq = seq
            event.timestamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
            await self.store.append_events(
                session_id, [(seq, kind(event), event.SerializeToString())]
            )
            self._seq[session_id] = seq
            for subscriber in tuple(self._subscribers[session_id]):
                subscriber.offer(event)
        return event

    async def subscribe(self, session_id: str, after: int) -> Subscription:
        """Events with seq > ``after``; a negative ``after`` means only new ones."""
        async with self._locks[session_id]:
            start = await self._current(session_id) if after < 0 else after
            subscription = Subscription(self, session_id, start, self.queue_size)
            self._subscribers[session_id].add(subscription)
        return subscription

    def nudge(self, session_id: str, seq: int) -> None:
        """Events up to ``seq`` were committed elsewhere; wake this process's subscribers."""
        for subscriber in tuple(self._subscribers.get(session_id, ())):
            subscriber.nudge(seq)

    async def reset(self, session_id: str) -> None:
        """Forget the cached seq: another replica may have written since. Under the
        session's lock, so an emit in flight keeps the seq it has."""
        async with self._locks[session_id]:
            self._seq.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """Drop cached state of a session nobody watches (its events stay in Postgres)."""
        if not self._subscribers.get(session_id):
            self._subscribers.pop(session_id, None)
            self._seq.pop(session_id, None)
