"""The scripted model against the real `openai` SDK and plain HTTP."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from services.scripted_model import Scenario, ToolCallSpec
from services.scripted_model.chunks import due_after
from services.scripted_model.scenarios import REQUEST_LOG, STREAM_TEXT, ScriptedModelState
from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model

MODEL = "codelab-scripted"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    for name in ("read_file", "write_file", "list_files")
]


@pytest.fixture(scope="module")
async def model() -> AsyncIterator[ScriptedModelHandle]:
    async with running_scripted_model(token_delay_ms=0) as handle:
        yield handle


@pytest.fixture(autouse=True)
def _reset(model: ScriptedModelHandle) -> None:
    model.state.clear()
    model.state.clear_requests()


@pytest.fixture
async def client(model: ScriptedModelHandle) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="any", max_retries=0) as c:
        yield c


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_non_streaming_text(model: ScriptedModelHandle, client: openai.AsyncOpenAI) -> None:
    model.state.enqueue({"text": "Hello there, world!"})
    completion = await client.chat.completions.create(model=MODEL, messages=user("hi"))
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello there, world!"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 5  # Hello there , world !
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


async def test_non_streaming_tool_calls(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue(Scenario(tool_calls=(ToolCallSpec("list_files", {"path": "."}, "call_1"),)))
    completion = await client.chat.completions.create(
        model=MODEL, messages=user("list"), tools=TOOLS
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id == "call_1"
    assert call.function.name == "list_files"
    assert json.loads(call.function.arguments) == {"path": "."}


async def test_streaming_text_reassembles_exactly(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    text = "def add(a, b):\n    return  a + b\n\nПривет,   мир! "
    model.state.enqueue({"text": text})
    stream = await client.chat.completions.create(model=MODEL, messages=user("x"), stream=True)
    chunks = [chunk async for chunk in stream]
    assert len({c.id for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content == ""
    pieces = [c.choices[0].delta.content or "" for c in chunks[1:-1]]
    assert len(pieces) > 5
    assert "".join(pieces) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


async def test_chunk_size_splits_by_characters(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "abcdefghij", "chunk_size": 3})
    stream = await client.chat.completions.create(model=MODEL, messages=user("x"), stream=True)
    pieces = [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]
    assert pieces == ["abc", "def", "ghi", "j"]


async def test_streaming_two_tool_calls_assemble(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    write_args = {"path": "src/app.py", "content": "print('hi')\n" * 5}
    scenario = {
        "text": "Let me do that.",
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "main.py"}},
            {"name": "write_file", "arguments": write_args},
        ],
    }
    model.state.enqueue(scenario)
    stream = await client.chat.completions.create(
        model=MODEL, messages=user("do it"), tools=TOOLS, stream=True
    )
    calls: dict[int, dict[str, Any]] = {}
    fragments: dict[int, int] = {}
    text, finish = "", None
    async for chunk in stream:
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            if delta.id:
                assert entry["id"] is None, "id must only come with the first delta of a call"
                entry["id"] = delta.id
                assert delta.type == "function"
            if delta.function and delta.function.name:
                entry["name"] += delta.function.name
            if delta.function and delta.function.arguments:
                entry["arguments"] += delta.function.arguments
                fragments[delta.index] = fragments.get(delta.index, 0) + 1
    assert text == "Let me do that."
    assert finish == "tool_calls"
    assert sorted(calls) == [0, 1]
    assert [calls[i]["name"] for i in (0, 1)] == ["read_file", "write_file"]
    assert json.loads(calls[0]["arguments"]) == {"path": "main.py"}
    assert json.loads(calls[1]["arguments"]) == write_args
    assert all(calls[i]["id"].startswith("call_") for i in (0, 1))
    assert calls[0]["id"] != calls[1]["id"]
    assert fragments[0] > 1 and fragments[1] > 1


async def test_stream_helper_accumulates_tool_calls(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue(
        {
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "a.py", "content": ""}},
                {"name": "list_files", "arguments": {"path": ".", "content": ""}},
            ]
        }
    )
    async with client.chat.completions.stream(
        model=MODEL, messages=user("x"), tools=TOOLS
    ) as stream:
        async for _event in stream:
            pass
        final = await stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    names = [call.function.name for call in message.tool_calls]
    assert names == ["read_file", "list_files"]
    args = [json.loads(call.function.arguments) for call in message.tool_calls]
    assert args == [{"path": "a.py", "content": ""}, {"path": ".", "content": ""}]


async def test_include_usage_adds_usage_chunk(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "one two three", "usage": {"prompt_tokens": 11}})
    stream = await client.chat.completions.create(
        model=MODEL, messages=user("x"), stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (11, 3)
    assert last.usage.total_tokens == 14
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"


async def test_reasoning_reaches_the_sdk_beside_the_answer(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"reasoning": "Let me think.", "text": "Done."})
    completion = await client.chat.completions.create(model=MODEL, messages=user("x"))
    message = completion.choices[0].message
    assert message.content == "Done."
    assert message.model_extra == {"reasoning_content": "Let me think."}
    assert completion.usage is not None and completion.usage.completion_tokens_details
    assert completion.usage.completion_tokens_details.reasoning_tokens == 4


async def test_max_tokens_truncates_with_length(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "one two three four five"})
    completion = await client.chat.completions.create(model=MODEL, messages=user("x"), max_tokens=2)
    assert completion.choices[0].message.content == "one two"
    assert completion.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
    ],
)
async def test_error_status_maps_to_sdk_exception(
    model: ScriptedModelHandle,
    client: openai.AsyncOpenAI,
    status: int,
    exception: type[openai.APIStatusError],
) -> None:
    model.state.enqueue({"error": {"status": status, "message": "scripted failure", "code": "x"}})
    with pytest.raises(exception) as caught:
        await client.chat.completions.create(model=MODEL, messages=user("x"), stream=True)
    assert caught.value.status_code == status
    assert caught.value.body == {
        "message": "scripted failure",
        "type": caught.value.body["type"],  # type: ignore[index]
        "param": None,
        "code": "x",
    }


async def test_times_consumes_n_requests(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"error": {"status": 503, "message": "busy"}, "times": 2}, {"text": "ok"})
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model=MODEL, messages=user("x"))
    completion = await client.chat.completions.create(model=MODEL, messages=user("x"))
    assert completion.choices[0].message.content == "ok"
    assert model.state.pending() == []


async def test_match_routes_to_the_right_request(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"match": "beta", "text": "B"}, {"match": "alpha", "text": "A"})
    history = [{"role": "user", "content": "beta earlier"}, {"role": "assistant", "content": "."}]

    async def ask(messages: list[Any]) -> str | None:
        done = await client.chat.completions.create(model=MODEL, messages=messages)
        return done.choices[0].message.content

    assert await ask([*history, *user("now alpha please")]) == "A"  # last user message only
    unmatched = await ask(user("gamma"))
    assert unmatched is not None and "scripted model" in unmatched
    assert await ask(user("beta")) == "B"


async def test_repeat_keeps_scenario(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "again", "repeat": True})
    for _ in range(3):
        done = await client.chat.completions.create(model=MODEL, messages=user("x"))
        assert done.choices[0].message.content == "again"
    assert len(model.state.pending()) == 1


async def test_disconnect_after_chunks_breaks_the_stream(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "a b c d e f g h", "disconnect_after_chunks": 3})
    received = []
    with pytest.raises(openai.APIError):
        stream = await client.chat.completions.create(model=MODEL, messages=user("x"), stream=True)
        async for chunk in stream:
            received.append(chunk)
    assert len(received) == 3


async def test_first_token_delay_triggers_client_timeout(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    model.state.enqueue({"text": "late", "first_token_delay_ms": 2000, "times": 2})
    with pytest.raises(openai.APITimeoutError):
        stream = await client.chat.completions.create(
            model=MODEL, messages=user("x"), stream=True, timeout=0.3
        )
        async for _chunk in stream:
            pass
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model=MODEL, messages=user("x"), timeout=0.3)


async def test_models_endpoint(client: openai.AsyncOpenAI) -> None:
    models = [m async for m in client.models.list()]
    assert [(m.id, m.object, m.owned_by) for m in models] == [(MODEL, "model", "codelab")]


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
async def test_embeddings(client: openai.AsyncOpenAI, encoding_format: str | None) -> None:
    texts = ["read a file", "open the file and read it", "deploy the cluster"]
    extra: dict[str, Any] = {} if encoding_format is None else {"encoding_format": encoding_format}
    response = await client.embeddings.create(model="embed", input=texts, **extra)
    vectors = [item.embedding for item in response.data]
    if encoding_format == "base64":  # asked explicitly, so the SDK leaves the string alone
        import base64
        import struct

        raw = [base64.b64decode(v) for v in vectors]  # type: ignore[arg-type]
        vectors = [list(struct.unpack(f"<{len(b) // 4}f", b)) for b in raw]
    assert [item.index for item in response.data] == [0, 1, 2]
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.sqrt(_cosine(v, v)), 1.0, rel_tol=1e-5) for v in vectors)
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.2
    assert response.usage.prompt_tokens > 0


async def test_control_endpoints_over_http(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    async with httpx.AsyncClient(base_url=model.root_url) as http:
        queued = await http.post("/_scripted/scenarios", json={"text": "one"})
        assert queued.json() == {"queued": 1}
        queued = await http.post(
            "/_scripted/scenarios", json={"scenarios": [{"text": "two"}, {"match": "z"}]}
        )
        assert queued.json() == {"queued": 2}
        assert len((await http.get("/_scripted/scenarios")).json()["scenarios"]) == 3
        assert (await http.delete("/_scripted/scenarios")).json() == {"cleared": 3}

        await http.post("/_scripted/scenarios", json={"text": "hi"})
        await client.chat.completions.create(
            model=MODEL, messages=user("hello"), tools=TOOLS, stream=True
        )
        requests = (await http.get("/_scripted/requests")).json()
        assert len(requests) == 1
        assert requests[0]["stream"] is True
        assert requests[0]["messages"] == user("hello")
        assert [t["function"]["name"] for t in requests[0]["tools"]] == [
            "read_file",
            "write_file",
            "list_files",
        ]
        assert (await http.delete("/_scripted/requests")).json() == {"cleared": 1}
        assert (await http.get("/_scripted/requests")).json() == []


@pytest.mark.parametrize(
    "scenario",
    [
        {"text": 5},
        {"error": {"status": 200}},
        {"tool_calls": [{"arguments": {}}]},
        {"times": 0},
        {"unknown_field": 1},
        {"finish_reason": "because"},
        {"reasoning": 3},
        {"reasoning": "x", "reasoning_field": "thoughts"},
        {"raw_chunks": [1, 2]},
        {"error": {"status": 429, "retry_after": "soon"}},
        {"error": {"status": 429, "retry_after": -1}},
        ["not", "objects"],
    ],
)
async def test_invalid_scenario_is_rejected(model: ScriptedModelHandle, scenario: Any) -> None:
    async with httpx.AsyncClient(base_url=model.root_url) as http:
        response = await http.post("/_scripted/scenarios", json=scenario)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert model.state.pending() == []


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"model": "m"}', b'{"model": "m", "messages": "hi"}', b"[1]"],
)
async def test_malformed_chat_request_is_400(model: ScriptedModelHandle, body: bytes) -> None:
    async with httpx.AsyncClient(base_url=model.base_url) as http:
        response = await http.post(
            "/chat/completions", content=body, headers={"authorization": "Bearer whatever"}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]


def test_chunks_are_due_on_a_schedule_from_the_streams_start() -> None:
    # The first chunk at once, the second after the first-token delay, then one per delay.
    due = [due_after(p, first_delay=0.5, delay=0.02) for p in range(5)]
    assert due == pytest.approx([0.0, 0.5, 0.52, 0.54, 0.56])


async def test_a_schema_number_past_64_bits_is_counted_and_streamed(
    client: openai.AsyncOpenAI,
) -> None:
    """The compact JSON writer refuses integers past 64 bits; the model does not."""
    wide = json.loads(json.dumps(TOOLS))
    wide[0]["function"]["parameters"]["properties"]["path"]["maxLength"] = 2**70

    async def prompt_tokens(tools: list[Any]) -> int:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=user("hi"),
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        return [c.usage.prompt_tokens async for c in stream if c.usage][-1]

    # `"maxLength":<number>,`: three marks, the quotes twice, the name and the number.
    assert await prompt_tokens(wide) == await prompt_tokens(TOOLS) + 6


def test_the_request_log_keeps_the_latest_bodies() -> None:
    state = ScriptedModelState()
    for index in range(REQUEST_LOG + 5):
        state.record({"index": index})
    kept = state.requests
    assert len(kept) == REQUEST_LOG
    assert (kept[0]["index"], kept[-1]["index"]) == (5, REQUEST_LOG + 4)
    assert state.clear_requests() == REQUEST_LOG
    assert state.requests == []


async def test_the_streams_log_says_when_the_content_went_out(
    model: ScriptedModelHandle, client: openai.AsyncOpenAI
) -> None:
    """What a bench compares a pace kept downstream with: the model's own, late or not."""
    model.state.clear_streams()
    model.state.enqueue(
        {"match": "paced", "text": "one two three four five", "token_delay_ms": 20},
        {"match": "cut", "text": "a b c d e f", "token_delay_ms": 5, "disconnect_after_chunks": 4},
        {"match": "whole", "text": "six seven eight"},
    )
    stream = await client.chat.completions.create(
        model=MODEL, messages=user("paced please"), stream=True
    )
    words = [c.choices[0].delta.content async for c in stream if c.choices]
    assert "".join(w or "" for w in words) == "one two three four five"
    with pytest.raises(openai.APIError):
        cut = await client.chat.completions.create(model=MODEL, messages=user("cut"), stream=True)
        async for _ in cut:
            pass
    await client.chat.completions.create(model=MODEL, messages=user("whole"), stream=True)
    await client.chat.completions.create(model=MODEL, messages=user("not streamed"))
    async with httpx.AsyncClient(base_url=model.root_url) as http:
        streams = (await http.get("/_scripted/streams")).json()
        paced, cut_short, whole = streams
        assert paced["last_user"] == "paced please" and paced["writes"] == 5
        # Four gaps of 20 ms between the first word and the last, on the model's schedule.
        assert 0.075 <= paced["last_at"] - paced["first_at"] < 1.0
        # The role chunk and three words went out before the cut.
        assert cut_short["last_user"] == "cut" and cut_short["writes"] == 3
        # Unpaced: the rest of the answer is one write.
        assert whole["writes"] == 1 and whole["first_at"] == whole["last_at"]
        assert (await http.delete("/_scripted/streams")).json() == {"cleared": 3}
        assert (await http.get("/_scripted/streams")).json() == []


def test_a_streams_last_user_message_is_kept_short() -> None:
    state = ScriptedModelState()
    state.record_stream("x" * 5000, [1.0, 2.0])
    (entry,) = state.streams
    assert entry == {"last_user": "x" * STREAM_TEXT, "writes": 2, "first_at": 1.0, "last_at": 2.0}
