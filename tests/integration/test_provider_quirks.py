"""Provider stream shapes served by the scripted model over HTTP and read by llmproxy's
streaming client (the path every completion takes) and by the real `openai` SDK; rate
limits and context errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk

from services.common.model_stream import ModelFinished, ModelToolCall, ReasoningPiece, TextPiece
from services.llmproxy.assembly import Assembly
from services.llmproxy.errors import LlmContextExceeded, LlmUnavailable
from services.llmproxy.upstream import MAX_RETRY_AFTER, CompletionRequest, Upstream
from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "provider_streams.json").read_text()
)
REQUEST = CompletionRequest(messages=[{"role": "user", "content": "go"}])


@pytest.fixture(scope="module")
async def model() -> AsyncIterator[ScriptedModelHandle]:
    async with running_scripted_model() as handle:
        yield handle


@pytest.fixture
def scripted(model: ScriptedModelHandle) -> ScriptedModelHandle:
    """The shared model with nothing queued and no window."""
    model.state.clear()
    model.state.context_window = None
    return model


@pytest.fixture
async def upstream(scripted: ScriptedModelHandle) -> AsyncIterator[Upstream]:
    client = AsyncOpenAI(base_url=scripted.base_url, api_key="k", max_retries=0)
    upstream = Upstream(client, default_model="m", timeout=5.0, max_retries=2, backoff=0.01)
    yield upstream
    await upstream.close()


async def collect(upstream: Upstream) -> list[object]:
    return [chunk async for chunk in upstream.complete(REQUEST)]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("paced", [False, True], ids=["burst", "paced"])
async def test_each_family_streams_into_the_same_answer(
    model: ScriptedModelHandle, upstream: Upstream, case: dict[str, Any], paced: bool
) -> None:
    model.state.enqueue({"raw_chunks": case["chunks"], "token_delay_ms": 2 if paced else 0})
    chunks = await collect(upstream)
    expected = case["expect"]
    text = "".join(c.text for c in chunks if isinstance(c, TextPiece))
    reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningPiece))
    calls = [[c.id, c.name, c.arguments_json] for c in chunks if isinstance(c, ModelToolCall)]
    finished = chunks[-1]
    assert isinstance(finished, ModelFinished)
    assert (text, reasoning, calls) == (
        expected["text"],
        expected["reasoning"],
        expected["tool_calls"],
    )
    assert finished.finish_reason == expected["finish_reason"]
    if expected["usage"] is not None:
        assert [finished.prompt_tokens, finished.completion_tokens] == expected["usage"]
    else:  # estimated: never zero for a prompt, and the answer counts
        assert finished.prompt_tokens > 0
        assert finished.completion_tokens > 0
    assert finished.reasoning_tokens == expected.get(
        "reasoning_tokens", max(1, len(reasoning) // 4) if reasoning else 0
    )


async def sdk_stream(model: ScriptedModelHandle, case: dict[str, Any]) -> list[Any]:
    """``case`` streamed through ``AsyncOpenAI.chat.completions.create(stream=True)``."""
    model.state.enqueue({"raw_chunks": case["chunks"]})
    async with AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True
        )
        return [chunk async for chunk in stream]


def indexed(case: dict[str, Any]) -> bool:
    """Every tool-call delta of ``case`` carries its ``index`` (what the SDK's own
    accumulator needs) and the answer was not cut (which it raises on)."""
    deltas = [
        call
        for chunk in case["chunks"]
        for choice in chunk.get("choices") or ()
        for call in choice.get("delta", {}).get("tool_calls") or ()
    ]
    return case["expect"]["finish_reason"] != "length" and all("index" in d for d in deltas)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
async def test_the_sdk_parses_each_family_into_what_llmproxy_assembles(
    scripted: ScriptedModelHandle, case: dict[str, Any]
) -> None:
    """Every chunk is a valid ``ChatCompletionChunk`` to the SDK, the fields llmproxy reads
    (text, reasoning extras, finish_reason, usage) read the same off the SDK's objects, and
    the calls assembled from what the SDK parsed are those assembled from the wire."""
    chunks = await sdk_stream(scripted, case)
    assert len(chunks) == len(case["chunks"])
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    choices = [choice for chunk in chunks for choice in chunk.choices]
    extras = [choice.delta.model_extra or {} for choice in choices]
    reasoning = "".join(e.get("reasoning_content") or e.get("reasoning") or "" for e in extras)
    usage = next((c.usage for c in reversed(chunks) if c.usage is not None), None)
    expected = case["expect"]
    assert "".join(choice.delta.content or "" for choice in choices) == expected["text"]
    assert reasoning == expected["reasoning"]
    assert [c.finish_reason for c in choices if c.finish_reason] == [expected["finish_reason"]]
    tokens = None if usage is None else [usage.prompt_tokens, usage.completion_tokens]
    assert tokens == expected["usage"]
    parsed, wire = Assembly(), Assembly()
    for sdk_chunk, raw in zip(chunks, case["chunks"], strict=True):
        parsed.add(sdk_chunk.model_dump(mode="json", exclude_unset=True))
        wire.add(raw)
    assert [list(c) for c in parsed.tool_calls()] == expected["tool_calls"]
    assert parsed.tool_calls() == wire.tool_calls()


@pytest.mark.parametrize(
    "case", [c for c in CASES if indexed(c)], ids=[c["name"] for c in CASES if indexed(c)]
)
async def test_the_sdks_own_accumulator_agrees_where_it_applies(
    scripted: ScriptedModelHandle, case: dict[str, Any]
) -> None:
    """``chat.completions.stream`` joins indexed deltas itself (index-less ones, from Gemini
    and Mistral, are what llmproxy's assembly is for): the same answer comes out."""
    scripted.state.enqueue({"raw_chunks": case["chunks"]})
    client = AsyncOpenAI(base_url=scripted.base_url, api_key="k", max_retries=0)
    async with (
        client,
        client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "go"}]
        ) as stream,
    ):
        final = await stream.get_final_completion()
    message = final.choices[0].message
    calls = [[c.id, c.function.name, c.function.arguments] for c in message.tool_calls or ()]
    assert (message.content or "", calls) == (case["expect"]["text"], case["expect"]["tool_calls"])
    assert final.choices[0].finish_reason == case["expect"]["finish_reason"]


def recorded_sleeps(upstream: Upstream) -> list[float]:
    """The back-off waits ``upstream`` asks for, recorded instead of slept."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    upstream.sleep = record
    return waits


async def test_a_429_waits_what_retry_after_asks_then_succeeds(
    model: ScriptedModelHandle, upstream: Upstream
) -> None:
    waits = recorded_sleeps(upstream)
    model.state.enqueue(
        {"error": {"status": 429, "message": "Rate limit reached", "retry_after": 4}},
        {"text": "after the wait"},
    )
    chunks = await collect(upstream)
    assert "".join(c.text for c in chunks if isinstance(c, TextPiece)) == "after the wait"
    assert len(waits) == 1 and waits[0] >= 4


async def test_a_retry_after_longer_than_we_wait_fails_at_once(
    model: ScriptedModelHandle, upstream: Upstream
) -> None:
    waits = recorded_sleeps(upstream)
    model.state.enqueue(
        {"error": {"status": 429, "message": "quota", "retry_after": MAX_RETRY_AFTER * 2}}
    )
    with pytest.raises(LlmUnavailable, match="quota"):
        await collect(upstream)
    assert waits == []
    assert model.state.pending() == []


async def test_a_prompt_past_the_window_is_a_context_error_and_not_retried(
    model: ScriptedModelHandle, upstream: Upstream
) -> None:
    model.state.context_window = 3
    model.state.enqueue({"text": "never sent"})
    request = CompletionRequest(messages=[{"role": "user", "content": "far too many words here"}])
    with pytest.raises(LlmContextExceeded, match="maximum context length is 3 tokens"):
        async for _ in upstream.complete(request):
            pass
    assert len(model.state.pending()) == 1  # refused before a scenario was taken
