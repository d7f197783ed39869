"""The collector and a long-running service."""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Keep what the process built to start (modules, descriptors, templates, models) out
    of the collector's full passes: over a started service one took 10-33 ms, which was
    the p99 of time to first token (docs/decisions.md). Called once the service is built,
    and again when it has built something big to keep (tool search's catalog snapshot: a
    full pass over 10,000 tools takes ~15-30 ms, which was the p99 of a search): what was
    frozen before and has since become garbage is collected then."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
