"""A turn's model request sent as its user message arrives, while the turn starts.

A turn's first model request waits for the turn's start (``begin_turn`` reads the history,
the agent and what is open; a new session's attach comes before it): ~2-4 ms on the first
token's way. What that request will hold is known in the two common cases: a session whose
last turn this process answered (that turn's last request, its answer, then the new user
message) and a new session (the system prompt, tools and options of the last new session
of the same agent and prompt, then the message). So the guess goes out at once, and the
turn takes it at its model call only when the request it built is the same, field for
field; otherwise the guess is cancelled and the turn's own request sent. A guess can never
change an answer; a wrong one costs an upstream call, so a key whose guesses missed
``MISSES`` times in a row is not guessed again, and none is made with
``LLM_EARLY_REQUESTS=false``. The chunks of a guess wait in its call until its turn reads
them; one that no turn takes within ``EARLY_SECONDS`` (or whose turn ends without it) is
cancelled. What is kept to guess from is bounded in bytes (``KEPT_BYTES``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import Counter

from codelab.v1 import llmproxy_pb2 as pb

EARLY = Counter(
    "codelab_orchestrator_early_model_requests_total",
    "Model requests sent as their user message arrived, by what became of them: taken by "
    "the turn, replaced (the turn's request differed), unused (no model call took it)",
    ["outcome"],
)
EARLY_SECONDS = 30.0
"""Seconds an early request waits for its turn before it is cancelled."""
KEPT_BYTES = 32 << 20
"""Bytes of requests kept to guess from, the least recently used dropped first."""
MISSES = 3
"""Misses in a row after which a key (a session, or an agent and prompt) is not guessed."""
KEPT_KEYS = 4096
"""Keys whose misses are counted, the least recently missed forgotten first."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def remember(kept: OrderedDict[K, V], key: K, value: V, most: int) -> None:
    """Set ``key`` as ``kept``'s newest entry, the oldest dropped past ``most`` entries."""
    kept[key] = value
    kept.move_to_end(key)
    if len(kept) > most:
        kept.popitem(last=False)


@dataclass(frozen=True)
class Room:
    """Estimated tokens around an answered request, against its template's compaction
    threshold (``ContextKeeper.room``): a guess whose prompt would pass it is not made (the
    turn would compact its prompt and send another request)."""

    prompt: int
    """How far the answered request's prompt could grow and stay under the threshold."""
    answer: int
    """What its answer adds to the next turn's prompt."""
    first: int = 0
    """What its user message weighs (a new session's first request: the next new session
    replaces it)."""


class _Kept:
    """Requests by key, within ``KEPT_BYTES`` (least recently set dropped first)."""

    def __init__(self, budget: int = KEPT_BYTES) -> None:
        self.budget = budget
        self._items: OrderedDict[Hashable, tuple[Any, pb.CompleteRequest, int]] = OrderedDict()
        self._bytes = 0

    def set(self, key: Hashable, tag: Any, request: pb.CompleteRequest) -> None:
        self.pop(key)
        size = request.ByteSize()
        if size > self.budget:
            return
        self._items[key] = (tag, request, size)
        self._bytes += size
        while self._bytes > self.budget:
            _, (_, _, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped

    def get(self, key: Hashable) -> tuple[Any, pb.CompleteRequest] | None:
        found = self._items.get(key)
        return None if found is None else (found[0], found[1])

    def pop(self, key: Hashable) -> tuple[Any, pb.CompleteRequest] | None:
        found = self._items.pop(key, None)
        if found is None:
            return None
        self._bytes -= found[2]
        return found[0], found[1]


class EarlyCall:
    """A request sent before its turn asked for it: ``taken`` gives the call to read (what
    it answered meanwhile waits in the call)."""

    def __init__(
        self,
        request: pb.CompleteRequest,
        open_call: Callable[[], Awaitable[Any]],
        admit: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.request = request
        self._call: Any = None
        self._opening = asyncio.create_task(self._open(open_call, admit), name="early-request")
        self._expiry = asyncio.get_running_loop().call_later(EARLY_SECONDS, self._expire)

    async def _open(
        self, open_call: Callable[[], Awaitable[Any]], admit: Callable[[], Awaitable[None]] | None
    ) -> Any:
        if admit is not None:
            await admit()  # the day's budget, before anything is sent
        self._call = await open_call()
        return self._call

    async def taken(self) -> Any:
        """The call on its way; None when nothing usable went (the budget refused it, or
        sending failed): the turn then asks, and meets any failure, on its own."""
        self._expiry.cancel()
        try:
            return await self._opening
        except Exception:
            self.cancel()
            return None

    def _expire(self) -> None:
        EARLY.labels("unused").inc()
        self.cancel()

    def cancel(self) -> None:
        """Stop the request (llmproxy is told, as for any call left)."""
        self._expiry.cancel()
        self._opening.cancel()
        if self._call is not None:
            self._call.cancel()


class Guesses:
    """What each session's next turn will ask the model, as far as this process saw."""

    def __init__(self, budget: int = KEPT_BYTES) -> None:
        self._last = _Kept(budget)
        """Session -> its last turn request sent (its answer not in yet)."""
        self._next = _Kept(budget)
        """Session -> ((agent, room), its next turn request but the new user message)."""
        self._first = _Kept(budget)
        """(agent, session prompt) -> (room, a new session's first request but its user
        message). A room: the estimated tokens a user message may have before the turn's
        prompt would be compacted (then not sent as guessed): larger ones are not guessed."""
        self._misses: OrderedDict[Hashable, int] = OrderedDict()

    def sent(self, request: pb.CompleteRequest) -> None:
        """A turn's model request went out."""
        self._last.set(request.session_id, None, request)
        self._next.pop(request.session_id)

    def answered(
        self, sid: str, agent: str, prompt: str, answer: pb.ChatMessage, room: Room
    ) -> None:
        """Session ``sid``'s last request was answered with ``answer`` and no tool call
        (its turn is over): the next turn's request starts as that one plus the answer.
        ``prompt``: the session's own system prompt, for the new-session guess; ``room``:
        how far that request's prompt may grow before it would be compacted."""
        found = self._last.pop(sid)
        if found is None:
            return
        last = found[1]
        roles = [m.role for m in last.messages]
        if roles == ["system", "user"]:  # a new session's first request
            first = pb.CompleteRequest()
            first.CopyFrom(last)
            first.ClearField("session_id")
            del first.messages[1:]
            self._first.set((agent, prompt), room.prompt + room.first, first)
        following = pb.CompleteRequest()
        following.CopyFrom(last)
        following.messages.append(answer)
        self._next.set(sid, (agent, room.prompt - room.answer), following)

    def guess(
        self,
        sid: str,
        agent: str,
        user: pb.ChatMessage,
        size: int,
        fresh: str | None,
        *,
        new: bool = False,
    ) -> tuple[Hashable, pb.CompleteRequest] | None:
        """The request session ``sid``'s turn for user message ``user`` (``size``: its
        estimated tokens) is likely to send with ``agent``, and the key its miss counts for.
        ``fresh``: the session is new, with this system prompt of its own; ``new``: only a
        new session's guess (the caller is not known to be the session's, its history is
        not to be sent for it)."""
        key: Hashable = sid
        found = None if new else self._next.pop(sid)
        if found is not None and found[0][0] == agent:
            room = found[0][1]
        else:
            key = (agent, fresh)
            found = self._first.get(key) if fresh is not None else None
            room = found[0] if found is not None else 0
        if found is None or size > room or self._misses.get(key, 0) >= MISSES:
            return None
        request = pb.CompleteRequest()
        request.CopyFrom(found[1])
        request.session_id = sid
        request.messages.append(user)
        return key, request

    def judged(self, key: Hashable, hit: bool) -> None:
        """A guess under ``key`` was (``hit``) or was not what its turn sent."""
        if hit:
            self._misses.pop(key, None)
            return
        remember(self._misses, key, self._misses.get(key, 0) + 1, KEPT_KEYS)
