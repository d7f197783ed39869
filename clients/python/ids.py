"""Client message ids: every message the runtime applies at most once carries one."""

from __future__ import annotations

import uuid

ONCE = frozenset({"user_message", "switch_agent", "cancel", "plan_decision"})
"""Message types the runtime applies at most once per ``client_message_id``."""


def new_client_id() -> str:
    """A fresh client message id."""
    return uuid.uuid4().hex
