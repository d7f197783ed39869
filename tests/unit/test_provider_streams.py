"""Each provider family's stream shape (tests/data/provider_streams.json) assembles into
the same answer; rate limits and context-length errors are read as each provider says them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.llmproxy.assembly import Assembly
from services.llmproxy.errors import LlmContextExceeded, LlmError, LlmUnavailable, UpstreamStatus
from services.llmproxy.http_stream import error_details, retry_after
from services.llmproxy.upstream import MAX_RETRY_AFTER, classify, retry_delay

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "provider_streams.json").read_text()
)


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    assembly = Assembly()
    text, reasoning = [], []
    for chunk in chunks:
        text.append(assembly.add(chunk))
        reasoning.append(assembly.take_reasoning())
    prompt, completion = assembly.tokens()
    return {
        "text": "".join(text),
        "reasoning": "".join(reasoning),
        "tool_calls": [list(call) for call in assembly.tool_calls()],
        "finish_reason": assembly.finish_reason,
        "usage": None if prompt is None else [prompt, completion],
        "model": assembly.model,
        "reasoning_tokens": assembly.reasoning_tokens(),
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_family_assembles_into_the_expected_answer(case: dict[str, Any]) -> None:
    got = assemble(case["chunks"])
    expected = case["expect"]
    for key, value in expected.items():
        assert got[key] == value, key
    assert got["model"] == expected.get("model", "m")


def test_chunks_split_differently_give_the_same_calls() -> None:
    # The same OpenAI stream, its argument fragments cut one character at a time.
    case = CASES[0]
    split: list[dict[str, Any]] = []
    for chunk in case["chunks"]:
        calls = (chunk.get("choices") or [{}])[0].get("delta", {}).get("tool_calls")
        arguments = calls[0]["function"].get("arguments") if calls else ""
        if not arguments:
            split.append(chunk)
            continue
        for char in arguments:
            part = json.loads(json.dumps(chunk))
            part["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = char
            split.append(part)
    assert assemble(split)["tool_calls"] == case["expect"]["tool_calls"]


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_in_seconds_milliseconds_or_a_date(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(headers, now=1445412480.0) == seconds


def test_the_back_off_waits_at_least_what_the_upstream_asked() -> None:
    asked = UpstreamStatus(429, "slow down", retry_after=3.0)
    delay = retry_delay(asked, 1, backoff=0.01)
    assert delay is not None and delay >= 3.0
    plain = retry_delay(UpstreamStatus(503, "busy"), 1, backoff=0.01)
    assert plain is not None and plain < 1.0
    too_long = UpstreamStatus(429, "slow down", retry_after=MAX_RETRY_AFTER + 1)
    assert retry_delay(too_long, 1, backoff=0.01) is None


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (
            400,
            '{"error": {"message": "This model\'s maximum context length is 128000 tokens.",'
            ' "type": "invalid_request_error", "code": "context_length_exceeded"}}',
            LlmContextExceeded,
        ),
        (
            400,
            '{"object": "error", "message": "This model\'s maximum context length is 8192'
            ' tokens. However, you requested 9000 tokens", "type": "BadRequestError"}',
            LlmContextExceeded,
        ),
        (
            400,
            '{"error": {"message": "prompt is too long: 210000 tokens > 200000 maximum"}}',
            LlmContextExceeded,
        ),
        (400, '{"error": {"message": "Invalid value for tool_choice"}}', LlmError),
        (429, '{"error": {"message": "Rate limit reached"}}', LlmUnavailable),
    ],
)
def test_a_context_length_error_is_told_apart_from_other_refusals(
    status: int, body: str, error: type[LlmError]
) -> None:
    message, code = error_details(status, body.encode())
    classified = classify(UpstreamStatus(status, message, code), started=False, timeout=1.0)
    assert type(classified) is error
