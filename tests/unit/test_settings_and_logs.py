"""Settings from the environment and JSON log lines."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

import pytest

from services.common.errors import SettingsError
from services.common.logs import JsonFormatter, log_context
from services.common.metrics import serve_metrics
from services.common.ports import free_port
from services.common.settings import Settings, parse_api_keys


def test_defaults_are_the_architecture_docs() -> None:
    settings = Settings.from_env({})
    assert (settings.gateway_host, settings.gateway_port) == ("127.0.0.1", 8000)
    assert settings.orchestrator_addr == "127.0.0.1:50051"
    assert settings.multi_agent_mode is True and settings.agent_stream_timeout == 300
    assert settings.agent_instances_max == 2048
    assert Settings.from_env({"AGENT_INSTANCES_MAX": "16"}).agent_instances_max == 16
    assert settings.llm_stream_pieces_per_s == 1000
    assert Settings.from_env({"LLM_STREAM_PIECES_PER_S": "0"}).llm_stream_pieces_per_s == 0


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"GATEWAY_PORT": "eighty"}, "GATEWAY_PORT"),
        ({"GATEWAY_PORT": "70000"}, "GATEWAY_PORT"),
        ({"MULTI_AGENT_MODE": "maybe"}, "MULTI_AGENT_MODE"),
        ({"AGENT_INSTANCES_MAX": "0"}, "AGENT_INSTANCES_MAX"),
        ({"AGENT_INSTANCES_MAX": "2.5"}, "AGENT_INSTANCES_MAX"),
        ({"AGENT_INSTANCES_MAX": "many"}, "AGENT_INSTANCES_MAX"),
        ({"HITL_ADDR": "nohost"}, "HITL_ADDR"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
        ({"LLM_STREAM_PIECES_PER_S": "-5"}, "LLM_STREAM_PIECES_PER_S"),
        ({"LLM_STREAM_PIECES_PER_S": "lots"}, "LLM_STREAM_PIECES_PER_S"),
        ({"GATEWAY_API_KEYS": "justakey"}, "GATEWAY_API_KEYS"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_api_keys_parse_to_users() -> None:
    assert parse_api_keys("k1:alice, k2:bob") == {"k1": "alice", "k2": "bob"}


def test_log_lines_are_json_with_the_ids_in_scope() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    with log_context(session_id="s-1", call_id="c-1"):
        line = json.loads(JsonFormatter("orchestrator").format(record))
    assert (line["msg"], line["session_id"], line["call_id"]) == ("hello there", "s-1", "c-1")
    outside = json.loads(JsonFormatter("orchestrator").format(record))
    assert "session_id" not in outside


async def test_log_context_survives_an_async_generator_resumed_elsewhere() -> None:
    async def events() -> object:
        with log_context(session_id="gen"):
            yield 1
            yield 2

    generator = events().__aiter__()  # type: ignore[attr-defined]
    assert await asyncio.create_task(generator.__anext__()) == 1
    assert await asyncio.create_task(generator.__anext__()) == 2
    with pytest.raises(StopAsyncIteration):
        await asyncio.create_task(generator.__anext__())  # exits in another task's context


@pytest.mark.parametrize(
    ("raw", "host"),
    [
        ("", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("metrics.internal", "metrics.internal"),
    ],
)
def test_metrics_host_defaults_to_loopback(raw: str, host: str) -> None:
    assert Settings.from_env({"METRICS_HOST": raw}).metrics_host == host


@pytest.mark.parametrize("raw", ["bad host", "http://x", "-x", "a/b"])
def test_a_bad_metrics_host_names_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError, match="METRICS_HOST"):
        Settings.from_env({"METRICS_HOST": raw})


def test_metrics_are_served_on_the_configured_host() -> None:
    free = free_port()
    port = serve_metrics(free - 1, 1, "127.0.0.1")
    assert port == free
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert b"codelab_grpc_calls_total" in reply.read()
