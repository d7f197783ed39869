"""Text pieces under load: the streams of one llmproxy share a budget of pieces per second.

Every text piece costs the mesh the same on its way to the IDE, whatever its length: a
message to the orchestrator, a row in a commit, a message to the gateway, a WebSocket frame
(~0.4 ms of CPU in all on the 2-core box). A model streams a word or two per chunk, so 100
answers at 50 tokens/s asked two cores for ~5,000 pieces a second and filled them. The
running streams therefore share ``LLM_STREAM_PIECES_PER_S``: with ``n`` streams, a stream's
next piece leaves no sooner than ``n / budget`` seconds after its last, and what arrives
meanwhile is joined into it (the text is the same; the IDE sees fewer, longer tokens). Below
``MIN_HOLD`` (fewer than 10 streams at the default 1,000) nothing is held and every piece goes
at once, as before; at most ``MAX_HOLD``, so an answer still moves four times a second
however many run. A stream's first piece, its tool calls, its failure and its end never
wait: what is held goes before them. vLLM's and SGLang's ``--stream-interval`` make the
same trade for the same per-piece cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from codelab.v1 import llmproxy_pb2 as pb

DELTAS = frozenset({"text_delta", "reasoning_delta"})
"""The chunks that may be joined: the text a model streams, and its reasoning."""
MIN_HOLD = 0.01
"""Seconds: a shorter hold is no hold (a model's chunks come further apart than that)."""
MAX_HOLD = 0.25
"""Seconds: the longest a piece waits for the next, whatever the number of streams."""


def delta_kind(item: pb.TaggedChunk) -> str | None:
    """``text_delta`` or ``reasoning_delta`` for a delta that may be joined; else None."""
    kind = item.chunk.WhichOneof("chunk") if item.HasField("chunk") else None
    return kind if kind in DELTAS else None


def joined(into: pb.TaggedChunk, item: pb.TaggedChunk) -> bool:
    """Append ``item``'s delta to ``into`` when both are deltas of one kind of one request
    (True); else leave both as they are (False)."""
    kind = delta_kind(item)
    if kind is None or into.id != item.id or delta_kind(into) != kind:
        return False
    setattr(into.chunk, kind, getattr(into.chunk, kind) + getattr(item.chunk, kind))
    return True


class TextBudget:
    """The pieces per second the running streams of this process share (0: no limit)."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.running = 0

    def hold(self) -> float:
        """Seconds a stream's next piece waits after its last, now (0: at once)."""
        if self.per_second <= 0:
            return 0.0
        hold = self.running / self.per_second
        return 0.0 if hold < MIN_HOLD else min(hold, MAX_HOLD)


class HeldText:
    """One request's chunks on their way to ``send``: a text (or reasoning) delta goes at
    once when the budget's hold since the stream's last piece has passed, else it joins the
    piece held for the next send, which a timer makes when the hold ends. Any other chunk
    sends what is held first, then itself."""

    def __init__(self, send: Callable[[pb.TaggedChunk], None], budget: TextBudget) -> None:
        self.send, self.budget = send, budget
        self.held: pb.TaggedChunk | None = None
        self.next_at = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def put(self, item: pb.TaggedChunk) -> None:
        if delta_kind(item) is None:
            self.flush()
            self.send(item)
            return
        if self.held is not None:
            if joined(self.held, item):
                return
            self.flush()  # reasoning, then text: each goes as its own piece
        loop = asyncio.get_running_loop()
        if loop.time() >= self.next_at:
            self._sent(item)
        else:
            self.held = item
            self.timer = loop.call_at(self.next_at, self.flush)

    def flush(self) -> None:
        """Send what is held, now."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.held is not None:
            held, self.held = self.held, None
            self._sent(held)

    def drop(self) -> None:
        """Forget what is held (the request was cancelled: nobody reads it)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.held = None

    def _sent(self, item: pb.TaggedChunk) -> None:
        self.send(item)
        self.next_at = asyncio.get_running_loop().time() + self.budget.hold()
