"""Traces of real turns, read from the SDK's in-memory exporter: one trace per turn, from
the gateway through the orchestrator to llmproxy, hitl and toolsearch, with the model
calls, tool calls and approvals as spans, and no span per token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.ide import ide, of
from tests.support.mesh import Mesh, running_mesh
from tests.support.templates import update_template


@pytest.fixture
async def mesh(database_url: str, exporter: InMemorySpanExporter) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def settled(
    exporter: InMemorySpanExporter, *turns: str, seconds: float = 10
) -> tuple[ReadableSpan, ...]:
    """The finished spans once every named turn span ended (a turn's span closes a moment
    after its ``done`` reached the client: the turn's bookkeeping follows it)."""
    async with asyncio.timeout(seconds):
        while True:
            spans = exporter.get_finished_spans()
            if set(turns) <= {s.name for s in spans}:
                return tuple(spans)
            await asyncio.sleep(0.02)


def trace_of(spans: tuple[ReadableSpan, ...], root_name: str) -> list[ReadableSpan]:
    """Every span of the (single) trace whose root is named ``root_name``."""
    roots = [s for s in spans if s.name == root_name and s.parent is None]
    assert len(roots) == 1, [s.name for s in spans if s.parent is None]
    trace_id = roots[0].context.trace_id
    return [s for s in spans if s.context.trace_id == trace_id]


def named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None
    return next(s for s in spans if s.context.span_id == span.parent.span_id)


async def test_a_turn_with_an_approval_is_one_trace_per_message(
    mesh: Mesh, exporter: InMemorySpanExporter
) -> None:
    answer = " ".join(f"word{i}" for i in range(40))
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "x"}}]},
        {"text": answer},
    )
    async with ide(mesh, "traced") as client:
        first = await client.say("write a.md")
        call_id = of(first, "tool_call")[0]["call_id"]
        await client.decide(call_id, "approve")
        last = await client.result(call_id, "written")
    assert "".join(e.get("token", "") for e in of(last, "assistant_message")) == answer
    spans = await settled(exporter, "turn user_message", "turn hitl_decision", "turn tool_result")

    asked = trace_of(spans, "ide user_message")
    turn = named(asked, "turn user_message")
    assert parent_of(turn, asked).name == "ide user_message"
    assert turn.attributes is not None and turn.attributes["codelab.session_id"] == "traced"
    model = named(asked, "model call")
    assert parent_of(model, asked) is turn
    upstream = [s for s in asked if s.name == "/codelab.v1.LlmProxy/Complete"]
    # The client span in the orchestrator and the server span in llmproxy, joined by the
    # W3C context in the call's metadata.
    assert {s.kind.name for s in upstream} == {"CLIENT", "SERVER"}
    tool = named(asked, "tool write_file")
    assert parent_of(tool, asked) is turn
    assert tool.attributes is not None and tool.attributes["codelab.call_id"] == call_id
    hitl_calls = {s.name for s in asked if s.kind.name == "SERVER" and "Hitl" in s.name}
    assert {"/codelab.v1.Hitl/Evaluate", "/codelab.v1.Hitl/CreateApproval"} <= hitl_calls

    decided = trace_of(spans, "ide hitl_decision")
    approval = named(decided, "approval decision")
    assert approval.attributes is not None
    assert approval.attributes["codelab.decision"] == "DECISION_APPROVE"
    assert parent_of(approval, decided).name == "turn hitl_decision"
    assert any(s.name == "/codelab.v1.Hitl/Decide" for s in decided)

    answered = trace_of(spans, "ide tool_result")
    streamed = named(answered, "model call")
    assert streamed.attributes is not None
    assert streamed.attributes["codelab.finish_reason"] == "stop"
    # Every token is an event, none is a span.
    # Forty upstream chunks, one model call: the spans do not grow with the answer.
    assert sorted(s.name for s in answered) == [
        "/codelab.v1.LlmProxy/Complete",
        "/codelab.v1.LlmProxy/Complete",
        "ide tool_result",
        "model call",
        "turn tool_result",
    ]
    assert len({asked[0].context.trace_id, decided[0].context.trace_id}) == 2


async def test_a_retrieval_turn_traces_its_tool_search(
    mesh: Mesh, exporter: InMemorySpanExporter
) -> None:
    # Retrieval mode: toolsearch picks each model call's tools.
    await update_template(mesh, "universal", tool_policy={"mode": "retrieval", "max_tools": 4})
    mesh.scripted.enqueue({"text": "Nothing to read."})
    async with ide(mesh, "traced-search") as client:
        await client.say("read the file main.py")
    spans = await settled(exporter, "turn user_message")
    asked = trace_of(spans, "ide user_message")
    search = [s for s in asked if s.name == "/codelab.v1.ToolSearch/SearchTools"]
    calls = [s for s in search if s.kind.name == "CLIENT"]
    served = [s for s in search if s.kind.name == "SERVER"]
    assert calls and len(served) == len(calls)
    turn = named(asked, "turn user_message")
    # The orchestrator's call under the turn; toolsearch's span under that call, joined
    # by the W3C context in the call's metadata.
    assert all(parent_of(call, asked) is turn for call in calls)
    assert {parent_of(s, asked).context.span_id for s in served} == {
        c.context.span_id for c in calls
    }


async def test_an_sse_request_and_its_turn_share_a_trace(
    mesh: Mesh, exporter: InMemorySpanExporter
) -> None:
    mesh.scripted.enqueue({"text": "Hello over SSE."})
    body = {"session_id": "sse-traced", "message": "hello", "message_type": "user_message"}
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        reply = await http.post("/agent/message/stream", json=body)
    assert "event: done" in reply.text
    spans = await settled(exporter, "turn user_message")
    turn = next(s for s in spans if s.name == "turn user_message")
    request = [s for s in spans if s.context.trace_id == turn.context.trace_id]
    root = next(s for s in request if s.parent is None)
    assert root.name == "POST /agent/message/stream" and root.kind.name == "SERVER"
    assert any(s.name == "model call" for s in request)
    assert not any(s.name.endswith((" send", " receive")) for s in spans)
