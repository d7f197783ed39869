"""A gRPC call opened ahead of need, for the next one a client makes.

Opening a streaming call costs round trips through gRPC's core before its first message
leaves (the call's initial metadata, then the message) and the server's handler start
before that message is read: ~0.7 ms of a new session's first token over ``/v1`` on a
2-core box for the orchestrator's Stream (model calls share a long-lived call instead:
services/orchestrator/peers/shared_calls.py). A client that opens such calls often (the
gateway, a Stream per new session) keeps one open ahead: the next use takes it and
writes its first message at once, and a replacement is opened ``delay`` seconds later,
off the taker's way. The server ends a call whose first message does not come within its
own wait (30 s): a spare is closed unused after ``max_age`` (20 s), and none is
kept while nothing takes them. A spare that ended (its server stopped) is not handed out.
Which replica serves a spare is chosen when it is opened, as for any call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

MAX_AGE = 20.0
"""Seconds a spare may wait: well within the servers' wait for a first message (30 s)."""
DELAY = 0.02
"""Seconds between a take and its replacement's opening (after a first token, mostly)."""


class Call(Protocol):
    """What the spare needs of a call: whether it ended, and a way to end it."""

    def done(self) -> bool: ...

    def cancel(self) -> bool: ...


C = TypeVar("C", bound=Call)


class SpareCall(Generic[C]):
    """At most one call opened ahead; ``take`` hands it out (or a new one)."""

    def __init__(
        self, open_call: Callable[[], C], max_age: float = MAX_AGE, delay: float = DELAY
    ) -> None:
        self._open = open_call
        self.max_age = max_age
        self.delay = delay
        self._spare: C | None = None
        self._opened_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        """Due: the spare's retirement while there is one, else its opening (if any)."""
        self._closed = False

    def prime(self) -> None:
        """Open a spare now, when none is kept or due (the first use then finds one)."""
        if self._spare is None and self._timer is None and not self._closed:
            self._replace()

    def take(self) -> C:
        """The spare when it is alive and fresh, else a new call (``take_spare``)."""
        call = self.take_spare()
        return call if call is not None else self._open()

    def take_spare(self) -> C | None:
        """The spare when it is alive and fresh, else None; a replacement is opened
        ``delay`` later (unless one is already due)."""
        call, self._spare = self._spare, None
        if (call is not None or self._timer is None) and not self._closed:
            self._set_timer(self.delay, self._replace)
        if call is not None and (call.done() or time.monotonic() - self._opened_at > self.max_age):
            call.cancel()
            call = None
        return call

    def _set_timer(self, seconds: float, then: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, then)

    def _replace(self) -> None:
        """Open the spare; it is closed unused ``max_age`` later unless taken."""
        self._spare, self._opened_at = self._open(), time.monotonic()
        self._set_timer(self.max_age, self._retire)

    def _retire(self) -> None:
        """Nothing took the spare in ``max_age``: close it and keep none."""
        self._timer = None
        if self._spare is not None:
            self._spare.cancel()
            self._spare = None

    def close(self) -> None:
        """Close the spare; open no more."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._retire()
