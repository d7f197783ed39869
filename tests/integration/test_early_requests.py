"""A turn's model request sent as its user message arrives (peers/early.py), through the
whole mesh: the guess for a session's next turn and for a new session's first turn is the
request the turn builds (the model sees one request a turn), and a guess the session's
changes made wrong is cancelled while the turn sends its own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openai import AsyncOpenAI
from prometheus_client import REGISTRY

from codelab.v1 import runtime_pb2
from services.orchestrator.session import runtime
from services.orchestrator.state.store import SessionStore
from tests.support.early import outcome
from tests.support.ide import ide, text_of
from tests.support.mesh import Mesh, running_mesh


def turns_seen(mesh: Mesh, marker: str) -> int:
    """Requests the model received whose last message is a user message naming ``marker``."""
    return sum(
        1
        for body in mesh.scripted.requests
        if body["messages"][-1]["role"] == "user" and marker in body["messages"][-1]["content"]
    )


async def test_a_sessions_next_turn_is_the_request_sent_as_its_message_arrived(
    mesh: Mesh,
) -> None:
    taken, replaced = outcome("taken"), outcome("replaced")
    mesh.scripted.enqueue({"match": "early-1", "text": "first answer"})
    mesh.scripted.enqueue({"match": "early-2", "text": "second answer"})
    async with ide(mesh, "early-next") as client:
        first = await client.say("early-1", agent_type="coder")
        second = await client.say("early-2", agent_type="coder")
    assert (text_of(first), text_of(second)) == ("first answer", "second answer")
    assert outcome("taken") == taken + 1 and outcome("replaced") == replaced
    assert (turns_seen(mesh, "early-1"), turns_seen(mesh, "early-2")) == (1, 1)
    last = mesh.scripted.requests[-1]["messages"]
    assert [m["content"] for m in last[-3:]] == ["early-1", "first answer", "early-2"]


async def test_a_new_sessions_first_turn_leaves_with_its_attach(mesh: Mesh) -> None:
    taken = outcome("taken")
    async with AsyncOpenAI(
        base_url=mesh.gateway_url + "/v1", api_key="anything", max_retries=0, timeout=20
    ) as sdk:
        for n in range(2):
            mesh.scripted.enqueue({"match": f"early-new-{n}", "text": f"answer {n}"})
            reply = await sdk.chat.completions.create(
                model="coder", messages=[{"role": "user", "content": f"early-new-{n}"}]
            )
            assert reply.choices[0].message.content == f"answer {n}"
    # The second new session's request was the first one's with its own message.
    assert outcome("taken") == taken + 1
    assert (turns_seen(mesh, "early-new-0"), turns_seen(mesh, "early-new-1")) == (1, 1)


async def test_a_guess_the_session_made_wrong_is_cancelled_and_the_turn_asks_itself(
    mesh: Mesh,
) -> None:
    replaced = outcome("replaced")
    mesh.scripted.enqueue({"match": "early-a", "text": "noted"})
    async with ide(mesh, "early-changed") as client:
        await client.say("early-a", agent_type="coder")
        # New context between the turns: the next system prompt is not the last one.
        await mesh.client.runtime.CreateSession(
            runtime_pb2.CreateSessionRequest(
                session_id="early-changed",
                metadata_json=json.dumps({"user_preferences": "tabs, not spaces"}),
            )
        )
        mesh.scripted.enqueue({"match": "early-b", "text": "with tabs", "times": 2})
        second = await client.say("early-b", agent_type="coder")
    assert text_of(second) == "with tabs"
    assert outcome("replaced") == replaced + 1
    asked = [b for b in mesh.scripted.requests if b["messages"][-1]["content"] == "early-b"]
    assert len(asked) == 2  # the guess (cancelled) and the turn's own request
    assert "tabs, not spaces" not in asked[0]["messages"][0]["content"]
    assert "tabs, not spaces" in asked[1]["messages"][0]["content"]


async def test_a_session_idle_between_its_turns_is_still_guessed(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker that served a session ends after a quiet while; what its turn sent does
    not: a person who reads the answer before writing again gets the early request too."""
    monkeypatch.setattr(runtime, "IDLE_SECONDS", 0.05)
    taken = outcome("taken")
    active = REGISTRY.get_sample_value("codelab_sessions_active") or 0.0
    async with ide(mesh, "early-idle") as client:
        await client.say("early-idle-1", agent_type="coder")
        for _ in range(100):  # the session's worker has ended
            if (REGISTRY.get_sample_value("codelab_sessions_active") or 0.0) == active:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the session's worker never ended")
        await client.say("early-idle-2", agent_type="coder")
    assert outcome("taken") == taken + 1


async def test_single_agent_mode_guesses_with_the_agent_that_takes_every_message(
    database_url: str,
) -> None:
    """No agent named, or another one named: the entry agent answers either way, so its
    request leaves early (the agent named is not the one asked)."""
    async with running_mesh(database_url, multi_agent_mode=False) as single:
        taken, replaced = outcome("taken"), outcome("replaced")
        named: list[dict[str, str]] = [{}, {}, {"agent_type": "coder"}]
        for n in range(3):
            single.scripted.enqueue({"match": f"early-single-{n}", "text": f"answer {n}"})
        async with ide(single, "early-single") as client:
            said = [
                text_of(await client.say(f"early-single-{n}", **extra))
                for n, extra in enumerate(named)
            ]
        assert said == ["answer 0", "answer 1", "answer 2"]
        assert outcome("taken") == taken + 2 and outcome("replaced") == replaced
        assert [turns_seen(single, f"early-single-{n}") for n in range(3)] == [1, 1, 1]


async def test_a_turn_that_ends_leaves_the_next_messages_early_request_alone(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next message can come while the last turn is still closing (its ``done`` is out,
    its end not written yet): that turn's end cancels its own untaken request, not the one
    the next message just sent."""
    closing = SessionStore.end_turn

    async def slow_end(self: SessionStore, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.3)
        await closing(self, *args, **kwargs)

    monkeypatch.setattr(SessionStore, "end_turn", slow_end)
    taken, unused = outcome("taken"), outcome("unused")
    mesh.scripted.enqueue({"match": "early-close-1", "text": "one"})
    mesh.scripted.enqueue({"match": "early-close-2", "text": "two"})
    async with ide(mesh, "early-close") as client:
        await client.say("early-close-1", agent_type="coder")
        second = await client.say("early-close-2", agent_type="coder")
    assert text_of(second) == "two"
    assert outcome("taken") == taken + 1 and outcome("unused") == unused
    assert turns_seen(mesh, "early-close-2") == 1


async def test_a_routed_turn_is_not_guessed_for_the_next_turn_naming_its_agent(
    mesh: Mesh,
) -> None:
    """The system prompt says why the agent took the session: the classifier's reason after
    a routed turn, "requested by the user" after a named one. So a routed turn's request is
    no guess for the next message naming the same agent (it would be cancelled: an upstream
    call paid for nothing); two named turns in a row still are."""
    taken, replaced = outcome("taken"), outcome("replaced")
    route = {"agent": "coder", "confidence": "high", "reason": "code to write"}
    mesh.scripted.enqueue({"text": json.dumps(route)})
    for n in range(3):
        mesh.scripted.enqueue({"match": f"early-via-{n}", "text": f"answer {n}"})
    async with ide(mesh, "early-routed") as client:
        said = [text_of(await client.say("early-via-0"))]
        for n in (1, 2):
            said.append(text_of(await client.say(f"early-via-{n}", agent_type="coder")))
    assert said == ["answer 0", "answer 1", "answer 2"]
    # The first message is asked twice: by the classifier, then by its turn.
    assert [turns_seen(mesh, f"early-via-{n}") for n in range(3)] == [2, 1, 1]
    prompts = {
        b["messages"][-1]["content"]: b["messages"][0]["content"]
        for b in mesh.scripted.requests
        if b["messages"][-1]["content"].startswith("early-via-")
    }
    assert "Reason for switch: code to write" in prompts["early-via-0"]
    assert "Reason for switch: requested by the user" in prompts["early-via-1"]
    assert prompts["early-via-2"] == prompts["early-via-1"]
    assert outcome("replaced") == replaced and outcome("taken") == taken + 1
