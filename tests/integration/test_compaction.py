"""Long sessions within the context budget: compaction through the real mesh."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from clients.python.client import SessionStream
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.orchestrator.turn.tokens import text_tokens
from services.scripted_model.chunks import count_prompt_tokens
from tests.support.budget import RESERVE, all_fit, small_window, source_file
from tests.support.early import outcome
from tests.support.mesh import Mesh, running_mesh
from tests.support.templates import update_template

CODEWORD = "PELICAN-42"


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        await small_window(running, "universal")
        yield running


def user(text: str) -> pb.ClientMessage:
    return pb.ClientMessage(user_message=pb.UserMessage(content=text, role="user"))


async def read_turn(stream: SessionStream, turn: int, text: str) -> list[pb.ServerEvent]:
    """One turn: the model reads a file (default behaviour), the IDE answers, the model
    sums it up."""
    await stream.send(user(text))
    asked = await stream.until_done()
    (call,) = [e.tool_call for e in asked if e.HasField("tool_call")]
    result = pb.ToolResult(call_id=call.call_id, result_json=json.dumps(source_file(turn)))
    await stream.send(pb.ClientMessage(tool_result=result))
    answered = await stream.until_done()
    assert answered[-1].done.status == "completed", answered
    return asked + answered


async def test_a_300_turn_session_stays_within_budget_and_remembers_its_first_turn(
    mesh: Mesh,
) -> None:
    compacted: list[pb.ContextCompacted] = []
    checked = 0
    async with await mesh.client.open_stream("s-long") as stream:
        first = f"read the file src/app_0.py and remember the codeword {CODEWORD}"
        for turn in range(300):
            text = first if turn == 0 else f"read the file src/app_{turn}.py"
            events = await read_turn(stream, turn, text)
            compacted += [e.context_compacted for e in events if e.HasField("context_compacted")]
            assert not [e for e in events if e.HasField("error")]
            if turn % 25 == 24:
                checked += all_fit(mesh)
        mesh.scripted.enqueue({"recall": r"PELICAN-\d+", "match": "codeword of my first"})
        await stream.send(user("What was the codeword of my first request?"))
        final = await stream.until_done()

    answer = "".join(e.assistant_message.token for e in final if e.HasField("assistant_message"))
    assert answer == CODEWORD
    request = mesh.scripted.requests[-1]
    # The first turn is no longer in the prompt verbatim: the answer came from the summary.
    assert first not in [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert "Summary of the earlier conversation" in request["messages"][0]["content"]

    checked += all_fit(mesh)
    assert checked > 300 * 2 + len(compacted)  # two calls a turn, one or more per summary
    assert len(compacted) >= 10
    assert all(c.tokens_after < c.tokens_before for c in compacted)
    covered = [c.messages for c in compacted]
    assert covered == sorted(covered) and covered[-1] > 1000
    rows = await mesh.pool.fetch(
        "select covers_from, covers_to, messages from orchestrator.summaries"
        " where session_id = 's-long' order by id"
    )
    assert len(rows) >= len(compacted)
    first_id = await mesh.pool.fetchval(
        "select min(id) from orchestrator.messages where session_id = 's-long'"
    )
    assert {r["covers_from"] for r in rows} == {first_id}
    # Nothing is deleted: every message of the 300 turns is still in the history.
    history = await mesh.client.runtime.GetHistory(
        runtime_pb2.GetHistoryRequest(session_id="s-long")
    )
    assert len(history.messages) == 300 * 4 + 2
    assert history.messages[0].content == first


async def test_every_request_of_a_compacted_session_fits_the_budget(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-fit") as stream:
        for turn in range(12):
            await read_turn(stream, turn, f"read the file src/fit_{turn}.py")
    requests = mesh.scripted.requests
    all_fit(mesh)
    # The answer is asked to stay within the reserve the budget kept for it.
    turns = [r for r in requests if "You condense" not in r["messages"][0]["content"]]
    assert {r.get("max_tokens") or r.get("max_completion_tokens") for r in turns} == {RESERVE}
    assert any(
        m["content"].startswith("You condense a coding session")
        for r in requests
        for m in r["messages"]
        if m["role"] == "system"
    )


async def test_a_context_length_error_compacts_and_retries_once(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-overflow") as stream:
        for turn in range(6):
            await read_turn(stream, turn, f"read the file src/over_{turn}.py")
        # The upstream counts more than the estimate said: it refuses the next prompt.
        mesh.scripted.context_window = 8_000
        mesh.scripted.clear_requests()
        await stream.send(user("read the file src/over_6.py"))
        events = await stream.until_done()
    kinds = [e.WhichOneof("event") for e in events]
    assert "context_compacted" in kinds and "error" not in kinds, events
    assert events[-1].done.status == "awaiting_tool_result"
    refused, *rest = mesh.scripted.requests
    assert count_prompt_tokens(refused["messages"], refused.get("tools")) > 8_000
    assert any("You condense" in r["messages"][0]["content"] for r in rest)


async def test_a_second_context_length_error_is_reported(mesh: Mesh) -> None:
    async with await mesh.client.open_stream("s-too-long") as stream:
        await read_turn(stream, 0, "read the file src/big_0.py")
        mesh.scripted.context_window = 10  # nothing fits, not even after compaction
        await stream.send(user("read the file src/big_1.py"))
        events = await stream.until_done()
    errors = [e.error for e in events if e.HasField("error")]
    assert [pb.ErrorCode.Name(e.error_code) for e in errors] == ["LLM_CONTEXT_LENGTH_EXCEEDED"]
    assert events[-1].done.status == "error"


async def test_reasoning_sent_back_counts_in_the_budget(mesh: Mesh) -> None:
    """Six answers of 3,000 reasoning tokens each pass the budget only when their reasoning
    goes back to the model: counted, they are compacted before the call, never refused."""
    await update_template(mesh, "universal", llm_config={"send_reasoning": True})
    thought = "a.b.c.d.e.f.g.h " * 200
    compacted = []
    missed = outcome("replaced") + outcome("unused")
    async with await mesh.client.open_stream("s-thinking") as stream:
        for n in range(6):
            mesh.scripted.enqueue({"match": f"question {n}", "reasoning": thought, "text": "Ok."})
            await stream.send(user(f"question {n}"))
            events = await stream.until_done()
            assert events[-1].done.status == "completed", events
            compacted += [e for e in events if e.HasField("context_compacted")]
    assert compacted
    # The turn that compacts sends another prompt than its last one plus the message: its
    # request is not guessed ahead (peers/early.py), so no upstream call went for nothing.
    assert outcome("replaced") + outcome("unused") == missed
    all_fit(mesh)
    counts = await mesh.pool.fetch(
        "select reasoning_tokens from orchestrator.messages"
        " where session_id = 's-thinking' and role = 'assistant'"
    )
    assert [r["reasoning_tokens"] for r in counts] == [text_tokens(thought)] * 6


async def test_a_templates_own_compaction_prompt_asks_for_the_summary(mesh: Mesh) -> None:
    prompt = "Condense this session for the on-call engineer; keep every path."
    notes = "On-call notes: the files src/pack_*.py were read."
    await update_template(mesh, "universal", prompt_pack={"compaction_prompt": prompt})
    # Only a summary request carries a transcript ("[user] ..."): it gets the notes.
    mesh.scripted.enqueue({"match": "[user] ", "text": notes, "repeat": True})
    async with await mesh.client.open_stream("s-pack") as stream:
        for turn in range(10):
            await read_turn(stream, turn, f"read the file src/pack_{turn}.py")
    requests = mesh.scripted.requests
    systems = [r["messages"][0]["content"] for r in requests]
    assert prompt in systems
    assert not [s for s in systems if s.startswith("You condense")]
    summaries = await mesh.pool.fetch(
        "select content from orchestrator.summaries where session_id = 's-pack'"
    )
    assert summaries and {r["content"] for r in summaries} == {notes}
    assert notes in systems[-1]  # the next turns read the template's summary
    all_fit(mesh)
