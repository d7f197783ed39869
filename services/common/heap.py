"""The collector and a long-running service."""

from __future__ import annotations

import gc

from services.common.grpc_wakeups import unblock_wakeups

THRESHOLDS = (20_000, 50, 100)
"""The collector's generation thresholds (CPython's are 700, 10, 10): a young collection
every 20,000 allocations instead of 700, the older ones rarer still. Every event allocates
a few objects at every hop; with the defaults the collector was 6-18 % of the busy samples
of the orchestrator, llmproxy and the gateway with 1,000 live sessions, and these cut that
pass's CPU by about a sixth (docs/decisions.md). A young collection of 20,000 objects
takes about a millisecond."""


def settle_heap() -> None:
    """Keep what the process built to start (modules, descriptors, templates, models) out
    of the collector's full passes: over a started service one took 10-33 ms, which was
    the p99 of time to first token (docs/decisions.md). Called once the service is built,
    and again when it has built something big to keep (tool search's catalog snapshot: a
    full pass over 10,000 tools takes ~15-30 ms, which was the p99 of a search): what was
    frozen before and has since become garbage is collected then. Sets the collector's
    ``THRESHOLDS``."""
    gc.set_threshold(*THRESHOLDS)
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def settle_built_service() -> None:
    """A gRPC service or the gateway is built: grpc.aio's wake-ups unblocked while ``gc``
    still sees grpc's queue (``grpc_wakeups``; a frozen object is out of its reach), then
    the heap settled."""
    unblock_wakeups()
    settle_heap()
