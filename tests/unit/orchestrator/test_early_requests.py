"""A turn's model request sent before the turn asks for it (peers/early.py), against a
real gRPC llmproxy that plays scripted replies: taken only when the turn's own request
is the same, cancelled otherwise or when no turn takes it, never sent past a spent
budget; and the guesses it is made from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from codelab.v1 import llmproxy_pb2 as pb
from services.common.model_stream import ModelFinished, TextPiece
from services.orchestrator.errors import BudgetExceeded
from services.orchestrator.peers import early as early_module
from services.orchestrator.peers.early import MISSES, Guesses, Room
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.state.store import StoredMessage
from tests.support.early import outcome
from tests.support.llm_proxy import Reply, ScriptedProxy, finish, scripted_llm, text

SYSTEM = StoredMessage("system", "be brief")
HELLO = StoredMessage("user", "hello")
ANSWER = StoredMessage("assistant", "ok", name="coder")
NEXT = StoredMessage("user", "and then?")
ROOM = Room(prompt=1000, answer=10)
"""Far from compaction."""


@pytest.fixture(params=[False, True], ids=["new-call", "shared-call"])
async def llm(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ScriptedProxy, LlmClient]]:
    async with scripted_llm(shared=request.param) as (proxy, client):
        client.early = True
        yield proxy, client


async def turn(client: LlmClient, *messages: StoredMessage) -> list[object]:
    return [out async for out in client.complete("s1", [SYSTEM, *messages])]


async def answered_once(client: LlmClient) -> None:
    """Session s1's first turn, answered with ANSWER and no call."""
    await turn(client, HELLO)
    client.answered("s1", "coder", "", ANSWER, reasoning=False, room=ROOM)


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def guessed(client: LlmClient, proxy: ScriptedProxy, *replies: Reply) -> None:
    """After s1's first turn, its next request sent early and answered by ``replies``."""
    await answered_once(client)
    proxy.play(*replies)
    client.send_early("s1", "coder", NEXT, None)
    await until(lambda: len(proxy.requests) == 2)  # on its way before the turn asks


async def test_the_turn_takes_the_request_it_would_have_sent(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    taken = outcome("taken")
    await guessed(client, proxy, Reply([text("early answer"), finish()]))
    outputs = await turn(client, HELLO, ANSWER, NEXT)
    assert outputs[0] == TextPiece("early answer")
    assert isinstance(outputs[-1], ModelFinished)
    assert len(proxy.requests) == 2  # the turn sent nothing of its own
    assert [m.content for m in proxy.requests[1].messages] == [
        "be brief", "hello", "ok", "and then?"
    ]  # fmt: skip
    assert outcome("taken") == taken + 1


async def test_a_request_unlike_the_turns_is_cancelled_and_the_turn_sends_its_own(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    replaced = outcome("replaced")
    await guessed(
        client, proxy, Reply([text("guessed")], hold=30), Reply([text("asked"), finish()])
    )
    other = StoredMessage("user", "something else")
    outputs = await turn(client, HELLO, ANSWER, other)
    assert outputs[0] == TextPiece("asked")
    assert proxy.requests[2].messages[-1].content == "something else"
    await until(proxy.cancelled.is_set)  # the guess was stopped at llmproxy
    assert outcome("replaced") == replaced + 1


async def test_a_request_no_turn_takes_is_cancelled(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    unused = outcome("unused")
    await guessed(client, proxy, Reply([text("never read")], hold=30))
    assert client.has_early("s1")
    client.drop_early("s1")
    await until(proxy.cancelled.is_set)
    assert not client.has_early("s1") and outcome("unused") == unused + 1


async def test_closing_the_client_cancels_what_it_sent_early(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    await guessed(client, proxy, Reply([text("never read")], hold=30))
    await client.close()
    await until(proxy.cancelled.is_set)
    client.send_early("s1", "coder", NEXT, None)
    assert not client.has_early("s1")  # and sends no more


async def test_a_request_no_turn_takes_in_time_is_cancelled(
    llm: tuple[ScriptedProxy, LlmClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, client = llm
    monkeypatch.setattr(early_module, "EARLY_SECONDS", 0.05)
    await guessed(client, proxy, Reply([text("never read")], hold=30))
    await until(proxy.cancelled.is_set)


async def test_nothing_is_sent_early_when_it_cannot_be_told(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    proxy, client = llm
    client.send_early("s1", "coder", NEXT, None)  # no turn of s1 answered here yet
    await answered_once(client)
    client.send_early("s1", "ask", NEXT, None)  # another agent
    client.early = False
    client.send_early("s1", "coder", NEXT, None)  # turned off
    await asyncio.sleep(0.1)
    assert len(proxy.requests) == 1 and not client.has_early("s1")


class Budget:
    """A day's budget that the user ``spent`` has used up."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    async def admit_model_call(self, session_id: str, user_id: str | None = None) -> None:
        self.asked.append((session_id, user_id))
        if user_id == "spent":
            raise BudgetExceeded("the daily tokens_per_day budget (1) is spent")

    async def record(self, session_id: str, model: str, prompt: int, completion: int) -> None:
        return None


async def test_a_new_sessions_request_goes_on_its_users_budget_and_not_past_it(
    llm: tuple[ScriptedProxy, LlmClient],
) -> None:
    """Before its attach a session may not exist, or not be the caller's: its early request
    is a new session's (never the session's own history), on the attaching user's budget."""
    proxy, client = llm
    budget = Budget()
    client.meter = budget
    await answered_once(client)  # s1's first request: a new session's, for coder and ""
    client.send_early("s1", "coder", NEXT, "", user_id="mallory")
    await until(lambda: len(proxy.requests) == 2)
    assert [m.content for m in proxy.requests[1].messages] == ["be brief", "and then?"]
    assert ("s1", "mallory") in budget.asked
    client.drop_early("s1")
    client.send_early("s2", "coder", NEXT, "", user_id="spent")
    await asyncio.sleep(0.1)
    assert len(proxy.requests) == 2  # refused before anything went
    outputs = [out async for out in client.complete("s2", [SYSTEM, NEXT])]
    assert outputs[0] == TextPiece("ok") and len(proxy.requests) == 3  # the turn asked itself
    assert ("s2", "spent") in budget.asked


def request(sid: str, *contents: str) -> pb.CompleteRequest:
    roles = ["system", *["user" if i % 2 == 0 else "assistant" for i in range(len(contents))]]
    messages = [
        pb.ChatMessage(role=role, content=c)
        for role, c in zip(roles, ["sys", *contents], strict=True)
    ]
    return pb.CompleteRequest(session_id=sid, purpose="turn", model="m", messages=messages)


def chat(role: str, content: str) -> pb.ChatMessage:
    return pb.ChatMessage(role=role, content=content)


def test_a_new_session_is_guessed_from_the_last_new_session_of_its_agent_and_prompt() -> None:
    guesses = Guesses()
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "be terse", chat("assistant", "hello"), ROOM)
    found = guesses.guess("b", "coder", chat("user", "yo"), 5, "be terse")
    assert found is not None
    key, guessed = found
    assert key == ("coder", "be terse")
    assert guessed.session_id == "b" and [m.content for m in guessed.messages] == ["sys", "yo"]
    assert guesses.guess("c", "coder", chat("user", "yo"), 5, "another prompt") is None
    assert guesses.guess("c", "ask", chat("user", "yo"), 5, "be terse") is None
    assert guesses.guess("c", "coder", chat("user", "yo"), 5, None) is None  # not new


def test_a_session_is_guessed_once_from_its_last_turn() -> None:
    guesses = Guesses()
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "", chat("assistant", "hello"), ROOM)
    found = guesses.guess("a", "coder", chat("user", "more"), 5, None)
    assert found is not None and found[0] == "a"
    assert [m.content for m in found[1].messages] == ["sys", "hi", "hello", "more"]
    assert guesses.guess("a", "coder", chat("user", "more"), 5, None) is None  # taken
    guesses.sent(request("a", "hi", "hello", "more"))  # its turn's request: asked, no answer
    assert guesses.guess("a", "coder", chat("user", "again"), 5, None) is None


def test_a_turn_ending_in_tool_calls_leaves_no_guess() -> None:
    guesses = Guesses()
    guesses.sent(request("a", "hi"))  # answered by tool calls: never ``answered``
    assert guesses.guess("a", "coder", chat("user", "more"), 5, None) is None


def test_a_key_that_missed_in_a_row_is_not_guessed_again_until_a_hit() -> None:
    guesses = Guesses()
    for _ in range(MISSES):
        guesses.sent(request("a", "hi"))
        guesses.answered("a", "coder", "", chat("assistant", "hello"), ROOM)
        found = guesses.guess("a", "coder", chat("user", "more"), 5, None)
        assert found is not None
        guesses.judged(found[0], hit=False)
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "", chat("assistant", "hello"), ROOM)
    assert guesses.guess("a", "coder", chat("user", "more"), 5, None) is None
    guesses.judged("a", hit=True)
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "", chat("assistant", "hello"), ROOM)
    assert guesses.guess("a", "coder", chat("user", "more"), 5, None) is not None


def test_what_is_kept_to_guess_from_stays_within_its_bytes() -> None:
    size = request("s0", "x" * 1000).ByteSize()
    guesses = Guesses(budget=3 * size + 10)
    for n in range(5):
        sid = f"s{n}"
        guesses.sent(request(sid, "x" * 1000))
        guesses.answered(sid, "coder", "", chat("assistant", ""), ROOM)
    assert guesses.guess("s0", "coder", chat("user", "?"), 5, None) is None  # dropped
    assert guesses.guess("s4", "coder", chat("user", "?"), 5, None) is not None


def test_a_message_the_prompt_has_no_room_for_is_not_guessed() -> None:
    """Past the room the turn compacts its prompt: the guess would be another request."""
    guesses = Guesses()
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "be terse", chat("assistant", "hello"), Room(100, 30, 8))
    assert guesses.guess("a", "coder", chat("user", "long"), 71, None) is None
    guesses.sent(request("a", "hi"))
    guesses.answered("a", "coder", "be terse", chat("assistant", "hello"), Room(100, 30, 8))
    assert guesses.guess("a", "coder", chat("user", "short"), 70, None) is not None
    # A new session's first request weighs its own message, not the last one's: 100 + 8.
    assert guesses.guess("b", "coder", chat("user", "long"), 109, "be terse") is None
    assert guesses.guess("b", "coder", chat("user", "fits"), 108, "be terse") is not None
