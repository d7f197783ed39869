"""grpc.aio's wake-up socket, made non-blocking on the poller's side.

grpc.aio (1.85) runs a poller thread that takes each completion (a message read or
written, a call's end) from gRPC's core, queues it and writes one byte to a socketpair
whose other end the event loop watches; the loop's reader takes one byte and runs every
queued completion. The writing end blocks: once the loop falls ~270 completions behind
(one socket buffer of 1-byte writes) the poller waits in ``write`` for the loop to take a
byte, and completions then reach the loop one per loop turn however many gRPC has ready.
Seen in the 1,000-session live pass: the orchestrator's socketpair sat full (``ss -x``:
212,736 bytes queued) and py-spy put a fifth of its samples in the poller's ``write``.
No write is needed when the buffer is full: the completion is queued before the byte, and
any of the ~270 pending bytes still calls the reader that runs it. So the poller's end is
made non-blocking and a full buffer drops only a wake-up already on its way.
"""

from __future__ import annotations

import gc
import logging
import socket

log = logging.getLogger(__name__)

POLLER = "PollerCompletionQueue"


def wake_sockets() -> list[socket.socket]:
    """The poller's socketpair, found through the completion queue's own references."""
    queues = [o for o in gc.get_objects() if type(o).__name__ == POLLER]
    return [s for q in queues for s in gc.get_referents(q) if isinstance(s, socket.socket)]


def unblock_wakeups() -> bool:
    """Make both ends of grpc.aio's wake-up socketpair non-blocking (the loop's end is
    already), once a server or channel exists and before the heap is frozen (frozen objects
    are out of ``gc.get_objects``' reach): ``heap.settle_built_service`` does both in that
    order. False when the pair is not found (a gRPC build that wakes the loop another way):
    nothing changes then."""
    sockets = wake_sockets()
    if len(sockets) != 2:
        fields = {"found": len(sockets), "frozen": gc.get_freeze_count()}
        log.info("grpc wake-up sockets not found", extra={"fields": fields})
        return False
    for end in sockets:
        end.setblocking(False)
    return True
