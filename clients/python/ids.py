"""Client message ids: every message the runtime applies at most once carries one."""

from __future__ import annotations

import uuid
from typing import Any

ONCE = frozenset({"user_message", "switch_agent", "cancel", "plan_decision"})
"""Message types the runtime applies at most once per ``client_message_id``."""


def new_client_id() -> str:
    """A fresh client message id."""
    return uuid.uuid4().hex


def with_client_id(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` itself, given a fresh ``client_message_id`` when the runtime applies its
    type once and it has none: sending the same dict again is a resend, applied once."""
    if message.get("type") in ONCE and message.get("client_message_id") is None:
        message["client_message_id"] = new_client_id()
    return message
