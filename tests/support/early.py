"""How many early model requests (peers/early.py) ended each way, in this process."""

from __future__ import annotations

from prometheus_client import REGISTRY


def outcome(name: str) -> float:
    """Early requests so far that were ``taken``, ``replaced`` or ``unused``."""
    found = REGISTRY.get_sample_value(
        "codelab_orchestrator_early_model_requests_total", {"outcome": name}
    )
    return found or 0.0
