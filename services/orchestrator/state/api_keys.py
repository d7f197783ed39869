"""The gateway's API keys in Postgres, stored as SHA-256 only.

A key is 32 random bytes (``ck_`` + URL-safe text): a plain SHA-256 is enough to store
it (nothing to brute-force, unlike a password), and looking it up by hash reveals
nothing through timing; the stored hash is still compared in constant time. Keys from
GATEWAY_API_KEYS are seeded by hash (source ``env``); revoking one keeps it revoked
even while the variable still lists it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from services.common.db import Pool, db_errors
from services.common.errors import InvalidInput
from services.common.key_hashing import key_hash, shown_prefix
from services.common.sql import load_queries
from services.orchestrator.errors import KeyNotFound
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "api_keys.sql")
KEY_PREFIX = "ck_"
USER_PATTERN = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")


@dataclass(frozen=True)
class KeyRow:
    """A stored key, without the key."""

    key_id: str
    user_id: str
    label: str
    prefix: str
    source: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class KeyCheck:
    """A key check: ``known`` when some key has the hash; ``valid`` when not revoked."""

    known: bool
    valid: bool
    user_id: str = ""


class ApiKeys:
    """Create, list, revoke and check keys."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def check(self, digest: bytes) -> KeyCheck:
        if len(digest) != hashlib.sha256().digest_size:
            return KeyCheck(known=False, valid=False)
        async with db_errors("check key", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["check_key"], digest)
        if row is None or not hmac.compare_digest(bytes(row["key_sha256"]), digest):
            return KeyCheck(known=False, valid=False)
        if row["revoked_at"] is not None:
            return KeyCheck(known=True, valid=False)
        return KeyCheck(known=True, valid=True, user_id=row["user_id"])

    async def seed(self, keys: Sequence[tuple[bytes, str, str]]) -> int:
        """Store (hash, user, prefix) triples not stored yet; the number added."""
        added = 0
        async with db_errors("seed keys", "DB_WRITE_ERROR"):
            for digest, user, prefix in keys:
                if len(digest) != hashlib.sha256().digest_size or not user:
                    raise InvalidInput("a seeded key needs a SHA-256 and a user")
                key_id = "env_" + digest.hex()[:12]
                if await self.pool.fetchval(QUERIES["seed_key"], key_id, digest, user, prefix):
                    added += 1
        return added

    async def create(self, user_id: str, label: str) -> tuple[KeyRow, str]:
        """A new key for ``user_id``: (its row, the key itself, shown this once)."""
        if not USER_PATTERN.match(user_id):
            raise InvalidInput(
                "user_id must be 1-128 of letters, digits, '_', '.', '@' or '-'",
                code="MISSING_REQUIRED_FIELD",
            )
        if len(label) > 200:
            raise InvalidInput("label must be at most 200 characters")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        key_id = "key_" + secrets.token_hex(8)
        async with db_errors("create key", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["create_key"], key_id, key_hash(key), user_id, label, shown_prefix(key)
            )
        return KeyRow(**dict(row)), key

    async def list(self, user_id: str = "", include_revoked: bool = False) -> list[KeyRow]:
        async with db_errors("list keys", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["list_keys"], user_id, include_revoked)
        return [KeyRow(**dict(r)) for r in rows]

    async def revoke(self, key_id: str) -> KeyRow:
        async with db_errors("revoke key", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(QUERIES["revoke_key"], key_id)
        if row is None:
            raise KeyNotFound(f"no API key {key_id!r}")
        return KeyRow(**dict(row))
