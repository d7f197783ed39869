"""Text pieces under load (services/llmproxy/pacing.py): the running streams share a budget
of pieces per second; a stream's text that comes sooner than its share joins the next piece,
which leaves when the hold ends or before anything that is not text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pytest import approx

from codelab.v1 import llmproxy_pb2 as pb
from services.llmproxy.many import serve_many
from services.llmproxy.pacing import MAX_HOLD, HeldText, TextBudget
from tests.support.many_client import Client

HOLD_S = 0.05
"""The hold of ``held()``'s budget: one stream of 20 pieces a second."""
PAST_HOLD_S = 0.2
"""Long enough for a hold's timer to have fired (the loop runs timers in deadline order)."""


def text(piece: str) -> pb.TaggedChunk:
    return pb.TaggedChunk(id=1, chunk=pb.CompleteChunk(text_delta=piece))


def reasoning(piece: str) -> pb.TaggedChunk:
    return pb.TaggedChunk(id=1, chunk=pb.CompleteChunk(reasoning_delta=piece))


def shown(items: list[pb.TaggedChunk]) -> list[str]:
    """Each sent item as ``kind:text`` (``end`` for an end)."""
    out = []
    for item in items:
        if item.end:
            out.append("end")
            continue
        kind = item.chunk.WhichOneof("chunk") or ""
        piece = getattr(item.chunk, kind) if kind in ("text_delta", "reasoning_delta") else ""
        out.append(f"{kind}:{piece}")
    return out


def held() -> tuple[HeldText, list[pb.TaggedChunk]]:
    budget = TextBudget(1 / HOLD_S)
    budget.running = 1
    sent: list[pb.TaggedChunk] = []
    return HeldText(sent.append, budget), sent


def test_the_hold_is_the_streams_share_of_the_budget_none_when_short_and_capped() -> None:
    budget = TextBudget(2000)
    budget.running = 19  # 9.5 ms: shorter than a model's chunks come, so no hold
    assert budget.hold() == 0.0
    budget.running = 100
    assert budget.hold() == approx(0.05)
    budget.running = 1000
    assert budget.hold() == MAX_HOLD
    unlimited = TextBudget(0)
    unlimited.running = 1000
    assert unlimited.hold() == 0.0


async def test_the_first_piece_goes_at_once_and_what_follows_within_the_hold_is_joined() -> None:
    stream, sent = held()
    stream.put(text("a "))
    stream.put(text("b "))
    stream.put(text("c "))
    assert shown(sent) == ["text_delta:a "]
    await asyncio.sleep(PAST_HOLD_S)
    assert shown(sent) == ["text_delta:a ", "text_delta:b c "]


async def test_anything_but_text_sends_what_is_held_first_without_waiting() -> None:
    stream, sent = held()
    stream.put(text("a "))
    stream.put(text("b "))
    call = pb.TaggedChunk(id=1, chunk=pb.CompleteChunk(tool_call=pb.LlmToolCall(id="c1")))
    stream.put(call)
    stream.put(pb.TaggedChunk(id=1, end=True))
    assert shown(sent) == ["text_delta:a ", "text_delta:b ", "tool_call:", "end"]
    assert stream.timer is None


async def test_reasoning_and_text_are_not_joined_into_one_piece() -> None:
    stream, sent = held()
    stream.put(text("a "))
    stream.put(reasoning("think "))
    stream.put(text("b "))
    assert shown(sent) == ["text_delta:a ", "reasoning_delta:think "]
    await asyncio.sleep(PAST_HOLD_S)
    assert shown(sent) == ["text_delta:a ", "reasoning_delta:think ", "text_delta:b "]


async def test_a_dropped_stream_never_sends_what_it_held() -> None:
    stream, sent = held()
    stream.put(text("a "))
    stream.put(text("b "))
    stream.drop()
    await asyncio.sleep(PAST_HOLD_S)
    assert shown(sent) == ["text_delta:a "]


async def test_without_a_budget_every_piece_goes_at_once() -> None:
    sent: list[pb.TaggedChunk] = []
    stream = HeldText(sent.append, TextBudget(0))
    for piece in ("a ", "b ", "c "):
        stream.put(text(piece))
    assert shown(sent) == ["text_delta:a ", "text_delta:b ", "text_delta:c "]
    assert stream.timer is None


def request(request_id: int, content: str) -> pb.CompleteEnvelope:
    body = pb.CompleteRequest(messages=[pb.ChatMessage(role="user", content=content)])
    return pb.CompleteEnvelope(id=request_id, request=body)


STUCK = asyncio.Event()


async def words(request: pb.CompleteRequest, context: Any) -> AsyncIterator[pb.CompleteChunk]:
    """The request's words, one chunk each; "then fail" fails after them, "then wait" waits
    after them until the test cancels the request."""
    content = request.messages[0].content
    for word in content.split():
        yield pb.CompleteChunk(text_delta=word + " ")
        await asyncio.sleep(0)
    if content.endswith("then fail"):
        raise RuntimeError("upstream broke")
    if content.endswith("then wait"):
        await STUCK.wait()


async def test_a_shared_call_delivers_all_text_in_fewer_pieces_before_each_end() -> None:
    client = Client()
    client.send(request(1, "one two three four five"))
    client.send(request(2, "six seven then fail"))
    client.close()
    budget = TextBudget(2 / HOLD_S)  # two streams: a hold of HOLD_S each
    items = [i async for batch in serve_many(client, words, budget=budget) for i in batch.items]
    pieces = {
        n: [i.chunk.text_delta for i in items if i.id == n and i.HasField("chunk")] for n in (1, 2)
    }
    assert "".join(pieces[1]) == "one two three four five "
    assert pieces[1][0] == "one " and len(pieces[1]) < 5  # the first at once, the rest joined
    assert "".join(pieces[2]) == "six seven then fail "
    ends = {i.id: ("end" if i.end else "failure") for i in items if i.end or i.HasField("failure")}
    assert ends == {1: "end", 2: "failure"}
    # The text a request had reached goes before its end or failure.
    for n in (1, 2):
        mine = [i for i in items if i.id == n]
        assert not mine[-1].HasField("chunk")
    assert budget.running == 0


async def test_a_cancelled_request_sends_nothing_it_held() -> None:
    client = Client()
    client.send(request(1, "a b c then wait"))
    budget = TextBudget(1 / HOLD_S)
    stream = serve_many(client, words, budget=budget)
    first = await anext(stream)
    assert [i.chunk.text_delta for i in first.items] == ["a "]
    client.send(pb.CompleteEnvelope(id=1, cancel=True))
    client.close()
    rest = [i async for batch in stream for i in batch.items]
    await asyncio.sleep(PAST_HOLD_S)
    assert [i for i in rest if i.HasField("chunk")] == [] and not any(i.end for i in rest)
    assert budget.running == 0
