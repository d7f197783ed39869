"""The WebSocket pump writes a batch the runtime sent together with one ``SEND_MANY`` send
when the server offers it, and frame by frame when it does not: the IDE reads the same
messages in the same order either way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import orjson
import pytest
from starlette.websockets import WebSocket

from clients.python import SessionStream
from codelab.v1 import common_pb2 as pb
from services.common.socket_writes import SEND_MANY
from services.gateway.streaming import pump_to_websocket


def token(seq: int) -> pb.ServerEvent:
    message = pb.AssistantMessage(token=f"t{seq}", agent="coder", message_id="m")
    return pb.ServerEvent(assistant_message=message, session_id="s", seq=seq)


class Batches:
    """A stream that hands out fixed batches, then ends as if this side closed it."""

    def __init__(self, batches: list[list[pb.ServerEvent]]) -> None:
        self._batches = batches
        self.closed = False

    async def batches(self) -> AsyncIterator[list[pb.ServerEvent]]:
        for batch in self._batches:
            yield batch
        self.closed = True


class Recorded:
    """A WebSocket that records what the pump sends: each entry is one ``send`` call."""

    def __init__(self, offers_many: bool) -> None:
        self.scope: dict[str, Any] = {"extensions": {SEND_MANY: {}} if offers_many else {}}
        self.sends: list[list[str]] = []

    async def send(self, message: dict[str, Any]) -> None:
        assert message["type"] == "websocket.send"
        self.sends.append(list(message["texts"]))

    async def send_text(self, data: str) -> None:
        self.sends.append([data])


@pytest.mark.parametrize(("offers_many", "calls"), [(True, 2), (False, 3)])
async def test_a_batch_is_one_send_only_where_the_server_offers_it(
    offers_many: bool, calls: int
) -> None:
    websocket = Recorded(offers_many)
    stream = Batches([[token(1), token(2)], [token(3)]])
    await pump_to_websocket(cast(SessionStream, stream), cast(WebSocket, websocket), "s")
    assert len(websocket.sends) == calls
    seen = [orjson.loads(text) for sent in websocket.sends for text in sent]
    assert [(e["seq"], e["token"]) for e in seen] == [(1, "t1"), (2, "t2"), (3, "t3")]
