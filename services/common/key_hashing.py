"""How an API key is stored and shown: its SHA-256, and a few first characters."""

from __future__ import annotations

import hashlib

SHOWN_CHARS = 8


def key_hash(key: str) -> bytes:
    """The SHA-256 the key table stores (and the gateway sends) for ``key``."""
    return hashlib.sha256(key.encode()).digest()


def shown_prefix(key: str) -> str:
    """The start of a key, to recognise it in a list (never enough to use it)."""
    return key[: min(SHOWN_CHARS, len(key) // 3)]
