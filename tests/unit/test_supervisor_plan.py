"""The supervisor's plan (children, env, knobs), its probes and its CLI exit codes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from services.common.errors import SettingsError
from services.common.ports import free_port
from services.supervisor.plan import (
    CHILD_NAMES,
    SupervisorKnobs,
    build_plan,
    needs_embedded_postgres,
    render_banner,
    select_children,
)
from services.supervisor.readiness import dial_address, grpc_serving, http_ok

ROOT = Path(__file__).resolve().parents[2]
DSN = "postgresql://codelab@localhost/codelab"


def test_a_fresh_env_gets_the_scripted_model_first_and_shared_secrets() -> None:
    plan = build_plan({"PATH": "/bin"}, embedded_dsn=DSN)

    assert [c.name for c in plan.children] == list(CHILD_NAMES)
    assert plan.children[0].name == "scripted_model"
    keys = {c.env["INTERNAL_API_KEY"] for c in plan.children}
    assert len(keys) == 1 and len(keys.pop()) >= 32
    assert {c.env["DATABASE_URL"] for c in plan.children} == {DSN}
    assert {c.env["OPENAI_BASE_URL"] for c in plan.children} == {"http://127.0.0.1:8090/v1"}
    assert plan.children[0].env["SCRIPTED_MODEL_PORT"] == "8090"
    assert all(c.env["PATH"] == "/bin" and c.ready is not None for c in plan.children)
    assert plan.children[1].argv == [sys.executable, "-m", "services.toolsearch"]
    assert "embedded" in plan.database


def test_each_run_generates_a_new_key_but_keeps_a_given_one() -> None:
    first, second = build_plan({}, embedded_dsn=DSN), build_plan({}, embedded_dsn=DSN)
    assert first.shared_env["INTERNAL_API_KEY"] != second.shared_env["INTERNAL_API_KEY"]
    given = build_plan({"INTERNAL_API_KEY": "k1"}, embedded_dsn=DSN)
    assert {c.env["INTERNAL_API_KEY"] for c in given.children} == {"k1"}


def test_an_external_model_and_database_need_no_scripted_model_or_embedded_pg() -> None:
    env = {"OPENAI_BASE_URL": "https://llm.example/v1", "DATABASE_URL": DSN}
    plan = build_plan(env)

    assert "scripted_model" not in [c.name for c in plan.children]
    assert {c.env["OPENAI_BASE_URL"] for c in plan.children} == {"https://llm.example/v1"}
    assert {c.env["DATABASE_URL"] for c in plan.children} == {DSN}
    assert not needs_embedded_postgres(env, CHILD_NAMES)
    assert needs_embedded_postgres({}, CHILD_NAMES)
    assert not needs_embedded_postgres({}, ["scripted_model"])


def test_addresses_and_ports_from_env_reach_children_and_banner() -> None:
    env = {
        "TOOLSEARCH_ADDR": "127.0.0.1:6002",
        "GATEWAY_PORT": "9000",
        "GATEWAY_HOST": "0.0.0.0",
        "SCRIPTED_MODEL_PORT": "9191",
    }
    plan = build_plan(env, embedded_dsn=DSN)

    assert all(c.env["TOOLSEARCH_ADDR"] == "127.0.0.1:6002" for c in plan.children)
    assert plan.children[0].env["SCRIPTED_MODEL_PORT"] == "9191"
    assert plan.model_url == "http://127.0.0.1:9191/v1"
    banner = render_banner(plan)
    assert banner.startswith("CodeLab Agent Runtime is up\n")
    assert "http://127.0.0.1:9000" in banner and "ws://127.0.0.1:9000/ws/{session_id}" in banner
    assert "toolsearch 127.0.0.1:6002" in banner and "built-in scripted model" in banner
    assert "http://127.0.0.1:9000/playground" in banner
    assert banner.endswith("Ctrl-C stops everything.\n")


def test_only_selects_children_in_start_order() -> None:
    assert select_children("gateway, toolsearch") == ("toolsearch", "gateway")
    assert select_children(None) == CHILD_NAMES
    plan = build_plan({}, embedded_dsn=DSN, only=select_children("hitl"))
    assert [c.name for c in plan.children] == ["hitl"]
    with pytest.raises(SettingsError, match="--only"):
        select_children("gateway,bogus")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SUPERVISOR_GRACE", "abc"),
        ("SUPERVISOR_GRACE", "-1"),
        ("SUPERVISOR_READY_TIMEOUT", "soon"),
        ("SUPERVISOR_BACKOFF_MAX", "never"),
        ("SCRIPTED_MODEL_PORT", "70000"),
    ],
)
def test_bad_knobs_are_rejected_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        build_plan({name: value}, embedded_dsn=DSN)


def test_knob_defaults_and_overrides() -> None:
    assert SupervisorKnobs.from_env({}) == SupervisorKnobs(10.0, 90.0, 30.0, 8090)
    env = {"SUPERVISOR_GRACE": "0.5", "SUPERVISOR_BACKOFF_MAX": "5"}
    assert SupervisorKnobs.from_env(env) == SupervisorKnobs(0.5, 90.0, 5.0, 8090)


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"SUPERVISOR_GRACE": "abc"}, [], "SUPERVISOR_GRACE must be a number"),
        ({"GATEWAY_PORT": "http"}, [], "GATEWAY_PORT"),
        ({}, ["--only", "nope"], "--only"),
    ],
)
def test_the_cli_exits_2_on_bad_settings(
    env: dict[str, str], args: list[str], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.supervisor", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dial_address_maps_wildcards_to_loopback() -> None:
    assert dial_address("0.0.0.0:50051") == "127.0.0.1:50051"
    assert dial_address("[::]:50051") == "127.0.0.1:50051"
    assert dial_address("10.0.0.5:1,10.0.0.6:1") == "10.0.0.5:1"


async def test_grpc_probe_follows_health_status() -> None:
    server = aio.server()
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        probe = grpc_serving(f"127.0.0.1:{port}")
        assert await probe() is True
        await health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await probe() is False
    finally:
        await server.stop(None)
    assert await grpc_serving(f"127.0.0.1:{free_port()}", timeout=1.0)() is False


async def test_http_probe_wants_a_200() -> None:
    status = "200 OK"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert await http_ok(f"http://127.0.0.1:{port}/health")() is True
        status = "503 Service Unavailable"
        assert await http_ok(f"http://127.0.0.1:{port}/health")() is False
    assert await http_ok(f"http://127.0.0.1:{free_port()}/v1/models")() is False
