"""Default answers of the scripted model, plus its settings, scenarios and embeddings."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from services.scripted_model import Scenario, ScenarioError, ScriptedModelSettings
from services.scripted_model.default_behaviour import classify, default_scenario
from services.scripted_model.embeddings import DIMENSIONS, embed_text
from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model

CLASSIFY_SYSTEM = (
    "You route requests to agents: coder, architect, debug, ask.\n"
    'Respond with JSON: {"agent": "agent_name", "confidence": "high|medium|low", '
    '"reason": "explanation"}'
)
FILE_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "list_files")
]


@pytest.fixture(scope="module")
async def model() -> AsyncIterator[ScriptedModelHandle]:
    async with running_scripted_model() as handle:
        yield handle


@pytest.fixture
async def client(model: ScriptedModelHandle) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0) as c:
        yield c


async def _route(client: openai.AsyncOpenAI, request: str) -> dict[str, str]:
    completion = await client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": CLASSIFY_SYSTEM},
            {"role": "user", "content": request},
        ],
    )
    content = completion.choices[0].message.content
    assert content is not None
    decision: dict[str, str] = json.loads(content)
    return decision


@pytest.mark.parametrize(
    ("request_text", "agent"),
    [
        ("Please implement a function that parses CSV files", "coder"),
        ("I get a traceback with KeyError when I run the tests", "debug"),
        ("Design the architecture for a plugin system", "architect"),
        ("What does this decorator do?", "ask"),
        ("Напиши функцию сортировки списка", "coder"),
        ("Спроектируй архитектуру сервиса уведомлений", "architect"),
        ("Почему возникает ошибка при запуске?", "debug"),
        ("Объясни, как работает asyncio", "ask"),
        ("hello there", "coder"),
    ],
)
async def test_classification_json(
    client: openai.AsyncOpenAI, request_text: str, agent: str
) -> None:
    decision = await _route(client, request_text)
    assert decision["agent"] == agent
    assert decision["confidence"] in {"high", "medium", "low"}
    assert decision["reason"]


def test_classification_inside_a_single_user_message() -> None:
    prompt = (
        "Agents:\n- coder: writes code\n- debug: fixes errors\n- ask: explains things\n"
        "User request: спроектируй архитектуру чата\n" + CLASSIFY_SYSTEM.splitlines()[1]
    )
    reply = default_scenario({"messages": [{"role": "user", "content": prompt}]})
    assert reply.text is not None
    assert json.loads(reply.text)["agent"] == "architect"


def test_classify_prefers_debug_on_tie_and_ask_only_alone() -> None:
    assert classify("fix the bug")["agent"] == "debug"
    assert classify("how do I write a parser")["agent"] == "coder"


async def test_list_files_when_user_asks_about_the_project(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "what files are in this project?"}],
        tools=FILE_TOOLS,
        stream=True,
    )
    names, arguments = [], ""
    async for chunk in completion:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if delta.function and delta.function.name:
                names.append(delta.function.name)
            arguments += (delta.function.arguments or "") if delta.function else ""
    assert names == ["list_files"]
    assert json.loads(arguments) == {"path": "."}


@pytest.mark.parametrize(
    ("text", "path"),
    [("read src/app.py please", "src/app.py"), ("Прочитай файл main.py", "main.py")],
)
def test_read_file_when_a_path_is_named(text: str, path: str) -> None:
    body = {"messages": [{"role": "user", "content": text}], "tools": FILE_TOOLS}
    reply = default_scenario(body)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("read_file", {"path": path})]


def test_no_tool_call_when_the_tool_is_not_offered() -> None:
    body = {"messages": [{"role": "user", "content": "list the files"}], "tools": FILE_TOOLS[:1]}
    reply = default_scenario(body)
    assert reply.tool_calls == () and reply.text


def test_tool_result_is_summarised() -> None:
    messages = [
        {"role": "user", "content": "what files are here?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "main.py\nREADME.md\n" + "x" * 500},
    ]
    reply = default_scenario({"messages": messages, "tools": FILE_TOOLS})
    assert reply.text is not None
    assert reply.text.startswith("I looked at the result of list_files: main.py")
    assert len(reply.text) < 300


async def test_russian_reply_for_cyrillic_input(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Привет! Помоги с кодом"}]
    )
    content = completion.choices[0].message.content or ""
    assert "сценарная модель" in content and "Помоги с кодом" in content


def test_english_reply_mentions_the_scripted_model() -> None:
    reply = default_scenario({"messages": [{"role": "user", "content": "Tell me a joke"}]})
    assert reply.text is not None and "built-in scripted model" in reply.text
    assert "Tell me a joke" in reply.text


def test_settings_from_env() -> None:
    assert ScriptedModelSettings.from_env({}) == ScriptedModelSettings(
        "127.0.0.1", 8090, 15, "codelab-scripted"
    )
    env = {
        "SCRIPTED_MODEL_HOST": "0.0.0.0",
        "SCRIPTED_MODEL_PORT": "9000",
        "SCRIPTED_MODEL_TOKEN_DELAY_MS": "0",
        "LLM_MODEL": "gpt-x",
    }
    assert ScriptedModelSettings.from_env(env) == ScriptedModelSettings("0.0.0.0", 9000, 0, "gpt-x")


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SCRIPTED_MODEL_PORT": "http"}, "SCRIPTED_MODEL_PORT"),
        ({"SCRIPTED_MODEL_PORT": "70000"}, "SCRIPTED_MODEL_PORT"),
        ({"SCRIPTED_MODEL_TOKEN_DELAY_MS": "-1"}, "SCRIPTED_MODEL_TOKEN_DELAY_MS"),
    ],
)
def test_settings_reject_bad_values(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ScriptedModelSettings.from_env(env)


def test_scenario_from_dict() -> None:
    scenario = Scenario.from_dict(
        {
            "match": "deploy",
            "tool_calls": [{"name": "run", "arguments": {"cmd": "ls"}, "id": "call_x"}],
            "error": {"status": 429, "message": "slow down"},
            "times": 3,
            "usage": {"prompt_tokens": 1},
        }
    )
    assert scenario.match == "deploy" and scenario.times == 3
    assert scenario.tool_calls[0].id == "call_x"
    assert scenario.error is not None and scenario.error.status == 429
    with pytest.raises(ScenarioError, match="chunk_size"):
        Scenario.from_dict({"chunk_size": True})


def test_embeddings_are_deterministic_and_normalised() -> None:
    first, second = embed_text("Read a File"), embed_text("read a file")
    assert first == second and len(first) == DIMENSIONS
    assert abs(sum(v * v for v in first) - 1.0) < 1e-9
    assert abs(sum(v * v for v in embed_text("")) - 1.0) < 1e-9


async def test_asking_to_create_a_named_file_calls_write_file() -> None:
    from services.scripted_model.default_behaviour import default_scenario

    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("read_file", "write_file", "list_files")
    ]
    body = {
        "messages": [{"role": "user", "content": "create hello.py that prints hi"}],
        "tools": tools,
    }
    (call,) = default_scenario(body).tool_calls
    assert call.name == "write_file"
    arguments = call.arguments
    assert isinstance(arguments, dict)
    assert arguments["path"] == "hello.py"
    assert "prints hi" in arguments["content"]
    read = default_scenario({**body, "messages": [{"role": "user", "content": "read main.py"}]})
    assert [c.name for c in read.tool_calls] == ["read_file"]
