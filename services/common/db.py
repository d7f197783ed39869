"""The asyncpg pool: JSON codecs, a liveness probe, errors mapped to DatabaseError."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, TypeVar

import asyncpg

from services.common.errors import DatabaseError

log = logging.getLogger(__name__)

Pool: TypeAlias = asyncpg.Pool
T = TypeVar("T")
# Keyed by id(): Pool has __slots__ without weakref support; a process has a few pools.
_DSNS: dict[int, str] = {}


def dsn_of(pool: Pool) -> str:
    """The DSN a pool was created with, for the few connections that must live outside it."""
    return _DSNS[id(pool)]


def _jsonb_bytes(value: object) -> bytes:
    return b"\x01" + json.dumps(value).encode()  # jsonb's binary form: a version, the text


def _json_value(data: bytes) -> object:
    return json.loads(data.decode())  # text: bytes would have their encoding sniffed


def _jsonb_value(data: bytes) -> object:
    return _json_value(data[1:])  # after jsonb's version byte


ARRAY_TYPES = (
    "select null::bool[], null::bytea[], null::float4[], null::float8[], null::int4[],"
    " null::int8[], null::json[], null::jsonb[], null::timestamptz[]"
)
"""Every array type the services' statements pass or read. asyncpg ships the codecs of
arrays of oid and text only and looks any other one up with its introspection query on the
first statement naming it (a round trip, 2-10 ms of Postgres), once per connection: a pool
growing under load put those lookups on turns' statements. Preparing this as a connection
opens looks them all up in one query."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    """JSON columns as Python values, in the binary format: a record's fields (a row or
    an array of rows in one column) always come in binary, and decode the same way. Then
    the array types the services use (``ARRAY_TYPES``)."""
    await conn.set_type_codec(
        "json",
        encoder=lambda v: json.dumps(v).encode(),
        decoder=_json_value,
        schema="pg_catalog",
        format="binary",
    )
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_bytes, decoder=_jsonb_value, schema="pg_catalog", format="binary"
    )
    await conn.prepare(ARRAY_TYPES)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pooled connections carry no session state (leases and LISTEN live on connections of
    their own, migrations unlock before release), so a released connection is not reset:
    asyncpg's default reset (RESET ALL, UNLISTEN *, CLOSE ALL, unlock all) costs one more
    round trip per query. An open transaction is still rolled back by asyncpg itself."""


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 20, attempts: int = 30
) -> Pool:
    """Connect, retrying while the server starts (e.g. right after the supervisor spawned it)."""
    delay = 0.1
    for attempt in range(attempts):
        try:
            pool: Pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                reset=_keep_session,
                command_timeout=30,
            )
            _DSNS[id(pool)] = dsn
            return pool
        except (TimeoutError, OSError, asyncpg.PostgresError) as error:
            if attempt == attempts - 1:
                raise DatabaseError(f"cannot connect to Postgres: {error}") from error
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
DEADLOCK_ATTEMPTS = 3


async def unless_deadlocked(run: Callable[[], Awaitable[T]]) -> T:
    """``run`` (one statement, its own transaction), again when Postgres rolled it back
    whole as a deadlock's victim, up to ``DEADLOCK_ATTEMPTS`` times. For statements that
    update many sessions' rows at once (the grouped writes, the instance mirror): each takes
    its rows in session order, but two plans may still meet in opposite orders."""
    for attempt in range(1, DEADLOCK_ATTEMPTS):
        try:
            return await run()
        except asyncpg.DeadlockDetectedError:
            log.info("deadlock victim, written again", extra={"fields": {"attempt": attempt}})
    return await run()  # the last attempt: its deadlock is the caller's error


@asynccontextmanager
async def db_errors(action: str, code: str) -> AsyncIterator[None]:
    """Inside a store: driver failures become DatabaseError with the spec's code
    (DB_READ_ERROR, DB_WRITE_ERROR, DB_CONNECTION_ERROR)."""
    try:
        yield
    except DB_ERRORS as error:
        raise DatabaseError(f"cannot {action}: {error}", code=code) from error


async def ping(pool: Pool) -> bool:
    """True when a connection answers ``select 1``."""
    try:
        async with pool.acquire(timeout=2) as conn:
            value: Any = await conn.fetchval("select 1")
            return bool(value == 1)
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False
