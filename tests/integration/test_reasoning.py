"""Reasoning deltas: streamed to the IDE as their own events, stored, counted, and sent
back to the model only when the template asks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from codelab.v1 import llmproxy_pb2
from tests.support.ide import ide, of, text_of
from tests.support.mesh import Mesh, running_mesh
from tests.support.templates import update_template


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_streams_as_its_own_event_before_the_answer(mesh: Mesh, field: str) -> None:
    thought = "The user greets me, so I greet back."
    mesh.scripted.enqueue(
        {"reasoning": thought, "reasoning_field": field, "text": "Hello!", "token_delay_ms": 5}
    )
    async with ide(mesh, f"s-think-{field}") as client:
        events = await client.say("hi")
    reasoning = of(events, "reasoning")
    assert "".join(e["token"] for e in reasoning) == thought
    answer_ids = {e["message_id"] for e in of(events, "assistant_message")}
    assert {e["message_id"] for e in reasoning} == answer_ids and len(answer_ids) == 1
    assert {e["agent"] for e in reasoning} == {"universal"}
    kinds = [e["type"] for e in events]
    assert kinds.index("reasoning") < kinds.index("assistant_message")
    assert text_of(events) == "Hello!"
    # Coalesced like tokens: never more events than upstream pieces.
    assert len(reasoning) <= len(thought.split())


async def test_reasoning_is_stored_counted_and_not_sent_back_by_default(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"reasoning": "Secret chain of thought.", "text": "One."})
    async with ide(mesh, "s-trace") as client:
        await client.say("first")
        mesh.scripted.clear_requests()
        await client.say("second")
    stored = await mesh.pool.fetchval(
        "select reasoning from orchestrator.messages"
        " where session_id = 's-trace' and role = 'assistant' order by id limit 1"
    )
    assert stored == "Secret chain of thought."
    usage = await mesh.client.llmproxy.GetUsage(llmproxy_pb2.GetUsageRequest(session_id="s-trace"))
    assert usage.reasoning_tokens == 5  # "Secret chain of thought ." as the model counts
    (request,) = mesh.scripted.requests
    assistant = [m for m in request["messages"] if m["role"] == "assistant"]
    assert assistant and all("reasoning_content" not in m for m in assistant)


async def test_a_template_that_asks_gets_its_reasoning_back(mesh: Mesh) -> None:
    await update_template(mesh, "universal", llm_config={"send_reasoning": True})
    mesh.scripted.enqueue({"reasoning": "Think first.", "text": "One."})
    async with ide(mesh, "s-send-back") as client:
        await client.say("first")
        mesh.scripted.clear_requests()
        await client.say("second")
    (request,) = mesh.scripted.requests
    (assistant,) = [m for m in request["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Think first."
