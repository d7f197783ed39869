"""The scripted model refuses what the real API refuses, through the real `openai` SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model


@pytest.fixture(scope="module")
async def model() -> AsyncIterator[ScriptedModelHandle]:
    async with running_scripted_model(token_delay_ms=0) as handle:
        yield handle


@pytest.fixture
async def client(model: ScriptedModelHandle) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="any", max_retries=0) as c:
        yield c


def tool(name: str) -> Any:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def call(call_id: str, name: str = "read_file") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


USER: Any = {"role": "user", "content": "go"}


async def refused(client: openai.AsyncOpenAI, **kwargs: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", **kwargs)
    return caught.value


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("git.diff", "invalid_value"),
        ("agent.ask", "invalid_value"),
        ("has space", "invalid_value"),
        ("", "invalid_value"),
        ("x" * 65, "string_above_max_length"),
    ],
)
async def test_tool_names_outside_the_pattern_are_refused(
    client: openai.AsyncOpenAI, name: str, code: str
) -> None:
    error = await refused(client, messages=[USER], tools=[tool("read_file"), tool(name)])
    assert error.code == code
    assert error.param == "tools[1].function.name"
    assert "tools[1].function.name" in error.message


async def test_a_valid_name_of_64_characters_is_accepted(client: openai.AsyncOpenAI) -> None:
    reply = await client.chat.completions.create(
        model="m", messages=[USER], tools=[tool("a-B_9" + "x" * 59)]
    )
    assert reply.choices[0].finish_reason in {"stop", "tool_calls"}


async def test_history_tool_call_names_are_checked_too(client: openai.AsyncOpenAI) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "git.diff")]},
        {"role": "tool", "tool_call_id": "c1", "content": "diff"},
    ]
    error = await refused(client, messages=messages)
    assert error.param == "messages[1].tool_calls[0].function.name"


async def test_a_tool_message_without_its_call_is_refused(client: openai.AsyncOpenAI) -> None:
    error = await refused(
        client, messages=[USER, {"role": "tool", "tool_call_id": "c1", "content": "x"}]
    )
    assert error.param == "messages.[1].role"
    assert "must be a response to a preceeding message with 'tool_calls'" in error.message


async def test_an_unknown_tool_call_id_is_refused(client: openai.AsyncOpenAI) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c2", "content": "x"},
    ]
    error = await refused(client, messages=messages)
    assert error.param == "messages.[2].tool_call_id"
    assert "'c2' not found" in error.message


async def test_calls_left_unanswered_are_refused(client: openai.AsyncOpenAI) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "user", "content": "and?"},
    ]
    error = await refused(client, messages=messages)
    assert "did not have response messages: c2" in error.message


async def test_a_tool_answer_after_another_message_is_refused(
    client: openai.AsyncOpenAI,
) -> None:
    messages = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": "done"},
        {"role": "tool", "tool_call_id": "c1", "content": "again"},
    ]
    error = await refused(client, messages=messages)
    assert error.param == "messages.[4].role"


async def test_well_paired_calls_are_accepted(client: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "user", "content": "thanks"},
    ]
    reply = await client.chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content


def answered(name: str) -> list[Any]:
    """A call of ``git_diff`` answered by a tool message named ``name``."""
    return [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "git_diff")]},
        {"role": "tool", "tool_call_id": "c1", "name": name, "content": "diff"},
    ]


async def test_a_tool_result_named_outside_the_pattern_is_refused(
    client: openai.AsyncOpenAI,
) -> None:
    error = await refused(client, messages=answered("git.diff"))
    assert error.code == "invalid_value"
    assert error.param == "messages[2].name"
    assert "messages[2].name" in error.message


async def test_a_participant_name_outside_the_pattern_is_refused(
    client: openai.AsyncOpenAI,
) -> None:
    error = await refused(client, messages=[{**USER, "name": "Ann Lee"}])
    assert error.param == "messages[0].name"


async def test_a_tool_result_named_in_the_wire_form_is_accepted(
    client: openai.AsyncOpenAI,
) -> None:
    reply = await client.chat.completions.create(model="m", messages=answered("git_diff"))
    assert reply.choices[0].message.content


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_a_body_that_is_not_strict_json_is_refused(
    model: ScriptedModelHandle, literal: str
) -> None:
    """Python's json module reads NaN and Infinity; JSON has neither, nor has the real API."""
    body = '{"model": "m", "messages": [{"role": "user", "content": "go"}], "temperature": %s}'
    async with httpx.AsyncClient(trust_env=False) as http:
        reply = await http.post(
            f"{model.base_url}/chat/completions",
            content=body % literal,
            headers={"content-type": "application/json", "authorization": "Bearer any"},
        )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["message"] == "We could not parse the JSON body of your request."
    assert error["type"] == "invalid_request_error"
