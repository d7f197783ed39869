"""The collector and a long-running service."""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Keep what the process built to start (modules, descriptors, templates, models) out
    of the collector's full passes: over a started service one took 10-33 ms, which was
    the p99 of time to first token (docs/decisions.md). Called once the service is built;
    what it leaves frozen is never collected, so nothing started after it is."""
    gc.collect()
    gc.freeze()
