"""The OpenAI-compatible API, driven by the official ``openai`` SDK against the in-process mesh."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import openai
import pytest
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)

from codelab.v1 import runtime_pb2
from tests.support.mesh import Mesh, running_mesh

SESSION_HEADER = "x-codelab-session"


@pytest.fixture
async def sdk(mesh: Mesh) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=mesh.gateway_url + "/v1", api_key="anything", max_retries=0, timeout=20
    ) as client:
        yield client


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in items]}


def user(text: str) -> ChatCompletionUserMessageParam:
    return {"role": "user", "content": text}


def session_of(completion: ChatCompletion) -> str:
    session_id = (completion.model_extra or {})["session_id"]
    assert isinstance(session_id, str) and session_id
    return session_id


def echoed(completion: ChatCompletion) -> ChatCompletionAssistantMessageParam:
    """The assistant message as the client resends it in the next request."""
    message = completion.choices[0].message.model_dump(exclude_none=True)
    kept = {k: v for k, v in message.items() if k in {"role", "content", "tool_calls"}}
    return cast("ChatCompletionAssistantMessageParam", kept)


def tool(call_id: str, content: Any) -> ChatCompletionToolMessageParam:
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def the_call(completion: ChatCompletion) -> ChatCompletionMessageFunctionToolCall:
    """The one function call of the answer."""
    (call,) = completion.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    return call


async def collect(chunks: AsyncStream[ChatCompletionChunk]) -> list[ChatCompletionChunk]:
    return [chunk async for chunk in chunks]


async def test_models_are_the_agent_templates(sdk: AsyncOpenAI) -> None:
    models = await sdk.models.list()
    ids = {m.id for m in models.data}
    assert {"coder", "ask", "architect", "debug", "orchestrator", "universal"} <= ids
    shapes = {(m.object, m.owned_by, type(m.created)) for m in models.data}
    assert shapes == {("model", "codelab", int)}
    assert (await sdk.models.retrieve("coder")).id == "coder"
    with pytest.raises(openai.NotFoundError):
        await sdk.models.retrieve("gpt-4o")


async def test_text_in_a_new_session_with_system_prompt(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue({"text": "Hello there, friend."})
    system: ChatCompletionMessageParam = {"role": "system", "content": "Answer in haiku."}
    create = sdk.chat.completions.with_raw_response.create
    raw = await create(model="ask", messages=[system, user("hi")])
    completion = raw.parse()
    session_id = session_of(completion)
    assert raw.headers[SESSION_HEADER] == session_id and session_id.startswith("oai-")
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hello there, friend.", "stop")
    assert completion.object == "chat.completion" and completion.model == "ask"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    prompt = mesh.scripted.requests[-1]["messages"]
    assert "Answer in haiku." in prompt[0]["content"] and prompt[-1]["content"] == "hi"
    # Created by the stream's attach, titled by the user's message.
    request = runtime_pb2.GetSessionRequest(session_id=session_id)
    assert (await mesh.client.runtime.GetSession(request)).title == "hi"


async def test_streamed_text_reassembles_exactly(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    text = "Streaming, word by word: it works — даже по-русски."
    mesh.scripted.enqueue({"text": text})
    stream = await sdk.chat.completions.create(model="coder", messages=[user("go")], stream=True)
    chunks = await collect(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1 and chunks[0].usage is None
    session_ids = {(c.model_extra or {})["session_id"] for c in chunks}
    assert session_ids == {stream.response.headers[SESSION_HEADER]}


async def test_include_usage_ends_with_a_usage_chunk(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue({"text": "Counted."})
    stream = await sdk.chat.completions.create(
        model="ask", messages=[user("count")], stream=True, stream_options={"include_usage": True}
    )
    chunks = await collect(stream)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens > 0 and last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


async def test_tool_round_trip(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue(calls(("read_file", {"path": "main.py"})), {"text": "It prints hi."})
    messages: list[ChatCompletionMessageParam] = [user("what does main.py do?")]
    first = await sdk.chat.completions.create(model="coder", messages=messages)
    assert first.choices[0].finish_reason == "tool_calls"
    call = the_call(first)
    assert (call.type, call.function.name) == ("function", "read_file")
    assert json.loads(call.function.arguments) == {"path": "main.py"}
    assert "codelab_approval" not in (call.model_extra or {})
    messages += [echoed(first), tool(call.id, {"content": "print('hi')"})]
    second = await sdk.chat.completions.create(model=session_of(first), messages=messages)
    assert second.choices[0].message.content == "It prints hi."
    assert second.choices[0].finish_reason == "stop"
    sent = mesh.scripted.requests[-1]["messages"][-1]
    assert sent["role"] == "tool" and sent["tool_call_id"] == call.id
    assert json.loads(sent["content"]) == {"content": "print('hi')"}


async def test_streamed_tool_call_deltas_like_openai(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    args = {"path": "src/app.py"}
    mesh.scripted.enqueue(calls(("read_file", args)), {"text": "Read."})
    stream = await sdk.chat.completions.create(model="coder", messages=[user("x")], stream=True)
    chunks = await collect(stream)
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    head, *rest = deltas
    assert head.function is not None and head.id
    assert (head.index, head.type, head.function.name) == (0, "function", "read_file")
    assert all(d.index == 0 and d.id is None for d in rest)
    arguments = "".join((d.function and d.function.arguments) or "" for d in deltas)
    assert json.loads(arguments) == args
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # The plain string result goes to the model as a JSON string.
    session_id = (chunks[0].model_extra or {})["session_id"]
    assistant = cast(
        "ChatCompletionAssistantMessageParam",
        {"role": "assistant", "tool_calls": [head.model_dump(exclude={"index"})]},
    )
    again = await sdk.chat.completions.create(
        model=session_id, messages=[user("x"), assistant, tool(head.id, "not json")], stream=True
    )
    assert "".join([c.choices[0].delta.content or "" async for c in again]) == "Read."
    assert mesh.scripted.requests[-1]["messages"][-1]["content"] == '"not json"'


async def test_approval_approved_then_run(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    args = {"path": "utils/sort.py", "content": "def sort(a): return sorted(a)\n"}
    mesh.scripted.enqueue(calls(("write_file", args)), {"text": "Written."})
    messages: list[ChatCompletionMessageParam] = [user("write sort")]
    ask = await sdk.chat.completions.create(model="coder", messages=messages)
    call = the_call(ask)
    approval = (call.model_extra or {})["codelab_approval"]
    assert approval["reason"] and "approve" in approval["decisions"]
    session_id = session_of(ask)
    messages += [echoed(ask), tool(call.id, {"codelab_decision": "approve"})]
    go = await sdk.chat.completions.create(model=session_id, messages=messages)
    run = the_call(go)
    assert (run.id, json.loads(run.function.arguments)) == (call.id, args)
    assert "codelab_approval" not in (run.model_extra or {})
    messages += [echoed(go), tool(run.id, {"ok": True})]
    done = await sdk.chat.completions.create(model=session_id, messages=messages)
    assert done.choices[0].message.content == "Written."
    audit = await mesh.pool.fetch("select decision from hitl.audit_log where call_id = $1", call.id)
    assert [r["decision"] for r in audit] == ["approve"]


async def test_approval_rejected_with_feedback(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue(calls(("execute_command", {"command": "rm -rf build"})), {"text": "OK."})
    messages: list[ChatCompletionMessageParam] = [user("clean up")]
    ask = await sdk.chat.completions.create(model="coder", messages=messages)
    call = the_call(ask)
    assert "rm" in (call.model_extra or {})["codelab_approval"]["reason"]
    decision = {"codelab_decision": "reject", "feedback": "keep the build dir"}
    messages += [echoed(ask), tool(call.id, decision)]
    after = await sdk.chat.completions.create(model=session_of(ask), messages=messages)
    assert after.choices[0].message.content == "OK." and not after.choices[0].message.tool_calls
    sent = mesh.scripted.requests[-1]["messages"][-1]
    assert sent["role"] == "tool" and "keep the build dir" in sent["content"]


async def test_a_plain_result_never_implies_an_approval(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue(calls(("write_file", {"path": "a.py", "content": "1"})))
    ask = await sdk.chat.completions.create(model="coder", messages=[user("write")])
    call = the_call(ask)
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=session_of(ask), messages=[user("write"), echoed(ask), tool(call.id, "done")]
        )
    assert caught.value.code == "TOOL_VALIDATION_ERROR"


async def test_upstream_unavailable_is_a_503(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue({"error": {"status": 503, "message": "overloaded"}, "times": 6})
    with pytest.raises(openai.APIStatusError) as caught:
        await sdk.chat.completions.create(model="coder", messages=[user("hi")])
    assert caught.value.status_code == 503 and caught.value.code == "LLM_PROXY_UNAVAILABLE"
    assert caught.value.response.headers[SESSION_HEADER].startswith("oai-")
    mesh.scripted.enqueue({"error": {"status": 503, "message": "overloaded"}, "times": 6})
    stream = await sdk.chat.completions.create(model="coder", messages=[user("hi")], stream=True)
    with pytest.raises(openai.APIError) as streamed:
        await collect(stream)
    assert streamed.value.code == "LLM_PROXY_UNAVAILABLE"


async def test_unknown_model_is_not_found(sdk: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.chat.completions.create(model="gpt-4o", messages=[user("hi")])
    assert caught.value.code == "AGENT_NOT_FOUND"
    assert isinstance(caught.value.body, dict) and caught.value.type == "invalid_request_error"


async def test_session_id_continues_with_the_earlier_turn(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue({"text": "Your name is Ada."})
    messages: list[ChatCompletionMessageParam] = [user("my name is Ada")]
    first = await sdk.chat.completions.create(model="ask", messages=messages)
    routed = {"agent": "ask", "confidence": "high", "reason": "a question"}
    mesh.scripted.enqueue({"text": json.dumps(routed)}, {"text": "Ada."})
    messages += [echoed(first), user("what is my name?")]
    second = await sdk.chat.completions.create(model=session_of(first), messages=messages)
    assert second.choices[0].message.content == "Ada." and session_of(second) == session_of(first)
    prompt = mesh.scripted.requests[-1]["messages"][-3:]
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    said = ["my name is Ada", "Your name is Ada.", "what is my name?"]
    assert [m["content"] for m in prompt] == said


async def test_template_plus_session_header_continues(mesh: Mesh, sdk: AsyncOpenAI) -> None:
    mesh.scripted.enqueue({"text": "One."}, {"text": "Two."})
    first = await sdk.chat.completions.create(model="coder", messages=[user("one")])
    same = {"X-CodeLab-Session": session_of(first)}
    second = await sdk.chat.completions.create(
        model="coder", messages=[user("two")], extra_headers=same
    )
    assert second.choices[0].message.content == "Two."
    assert session_of(second) == session_of(first)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "INVALID_MESSAGE"),
        (b'{"model": "\xff"}', "INVALID_MESSAGE"),  # not UTF-8
        (b'{"model": "coder", "messages": []}', "MISSING_REQUIRED_FIELD"),
        (b'{"model": "coder"}', "MISSING_REQUIRED_FIELD"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "MISSING_REQUIRED_FIELD"),
        (
            b'{"model": "ask", "messages": [{"role": "tool", "tool_call_id": "c"}]}',
            "MISSING_REQUIRED_FIELD",
        ),
    ],
)
async def test_bad_requests_are_openai_400s(mesh: Mesh, body: bytes, code: str) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.post("/v1/chat/completions", content=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["code"] == code


async def test_api_keys_and_session_ownership(database_url: str) -> None:
    keys = {"key-alice": "alice", "key-bob": "bob"}
    async with running_mesh(database_url, gateway_api_keys=keys) as mesh:
        base = mesh.gateway_url + "/v1"
        alice = AsyncOpenAI(base_url=base, api_key="key-alice", max_retries=0)
        bob = AsyncOpenAI(base_url=base, api_key="key-bob", max_retries=0)
        stranger = AsyncOpenAI(base_url=base, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            await stranger.models.list()
        assert refused.value.code == "UNAUTHORIZED"
        mesh.scripted.enqueue({"text": "Mine."})
        first = await alice.chat.completions.create(model="ask", messages=[user("hi")])
        with pytest.raises(openai.NotFoundError) as caught:
            await bob.chat.completions.create(model=session_of(first), messages=[user("hi")])
        assert caught.value.code == "AGENT_NOT_FOUND"
        await asyncio.gather(alice.close(), bob.close(), stranger.close())
