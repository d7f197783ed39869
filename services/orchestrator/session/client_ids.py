"""Client message ids: a repeated message is answered, never applied twice.

The claim is a Postgres row, so it holds across restarts and replicas. A claim is
``started`` once its message's handling began; a claim that never started and is not
waiting in this process (its owner died first, or Postgres failed before the start)
does not block a resend: that message was never applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool, db_errors
from services.orchestrator.state.store import QUERIES

IDEMPOTENT = frozenset({"user_message", "switch_agent", "cancel", "plan_decision"})


def client_message_id(item: object) -> str | None:
    """The id of a message the runtime applies at most once, when the client gave one."""
    if not isinstance(item, pb.ClientMessage) or not item.HasField("client_message_id"):
        return None
    return item.client_message_id if item.WhichOneof("message") in IDEMPOTENT else None


def kind_of(item: object) -> str:
    """The client message's type name ("" for anything else)."""
    return (item.WhichOneof("message") or "") if isinstance(item, pb.ClientMessage) else ""


@dataclass(frozen=True, slots=True)
class Claim:
    """What Postgres knows of a client message id in a session."""

    fresh: bool
    """This delivery claimed the id (the first one)."""
    started: bool
    first_seq: int | None


class ClientIds:
    """The claims table of one orchestrator."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def claim(self, session_id: str, client_id: str, kind: str) -> Claim:
        async with db_errors("claim client message id", "DB_WRITE_ERROR"):
            row = await self.pool.fetchrow(
                QUERIES["claim_client_message"], session_id, client_id, kind
            )
        if row is None:  # claimed by a concurrent delivery that committed meanwhile
            return Claim(fresh=False, started=False, first_seq=None)
        return Claim(bool(row["fresh"]), bool(row["started"]), row["first_seq"])

    async def start(self, session_id: str, client_id: str, first_seq: int) -> None:
        async with db_errors("start client message", "DB_WRITE_ERROR"):
            await self.pool.execute(
                QUERIES["start_client_message"], session_id, client_id, first_seq
            )

    async def forget(self, session_id: str, client_id: str) -> None:
        """Release a claim whose message was refused, so a resend is applied."""
        async with db_errors("forget client message", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["forget_client_message"], session_id, client_id)
