"""The collector and a long-running service."""

from __future__ import annotations

import gc

from services.common.grpc_wakeups import unblock_wakeups

THRESHOLDS = (2_000, 500, 100)
"""The collector's generation thresholds (CPython's are 700, 10, 10). The older
generations are what cost: with the defaults a full pass ran every 70,000 allocations
over everything a busy service holds, and the collector was 6-18 % of the busy samples of
the orchestrator, llmproxy and the gateway with 1,000 live sessions. Here the middle one
runs every million allocations and the full one every hundred million. The young one
stays near CPython's, because its pass is a pause on whatever the loop was doing: on a
2-core AMD EPYC VM a young pass over 20,000 objects took 10-16 ms, and each one was a
spike in time to first token (the p99). Over 2,000 it takes 1-3 ms. Tallied with a
``gc.callbacks`` hook in every process; measured in docs/decisions.md."""


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
