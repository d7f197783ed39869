"""`make run`'s supervisor with every service as a real process, driven from outside."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import grpc
import httpx
import pytest
import websockets
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from codelab.v1 import runtime_pb2, runtime_pb2_grpc
from tests.e2e.conftest import METRICS_OFFSET, MeshProcess

pytestmark = pytest.mark.e2e

SERVICES = {
    "orchestrator": "codelab.v1.AgentRuntime",
    "toolsearch": "codelab.v1.ToolSearch",
    "hitl": "codelab.v1.Hitl",
    "llmproxy": "codelab.v1.LlmProxy",
}


async def serving(address: str) -> bool:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def ws_turn(mesh: MeshProcess, session_id: str, text: str) -> list[dict[str, Any]]:
    url = f"{mesh.ws}/ws/{session_id}"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": text, "role": "user"}))
        events = []
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 30))
            events.append(event)
            if event["type"] == "done":
                return events


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_each_service_is_serving_and_reflects(real_mesh: MeshProcess, name: str) -> None:
    assert await serving(real_mesh.addr(name))
    async with grpc.aio.insecure_channel(real_mesh.addr(name)) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for reply in stub.ServerReflectionInfo(iter([request])):
            listed = {s.name for s in reply.list_services_response.service}
            break
    assert SERVICES[name] in listed


def blocking_unix_sockets(pid: int) -> list[int]:
    """The process's unix-domain sockets left blocking (read from /proc)."""
    with open("/proc/net/unix") as table:
        unix = {line.split()[6] for line in list(table)[1:] if len(line.split()) > 6}
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = int(info.read().split("flags:")[1].split()[0], 8)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:[") and target[8:-1] in unix and not flags & os.O_NONBLOCK:
            found.append(int(fd))
    return found


@pytest.mark.parametrize("name", [*sorted(SERVICES), "gateway"])
async def test_no_service_waits_on_grpc_s_wake_up_socket(real_mesh: MeshProcess, name: str) -> None:
    # services/common/grpc_wakeups.py: the poller's end of grpc.aio's socketpair is made
    # non-blocking when a service is built (before its heap is frozen out of gc's view).
    (pid,) = real_mesh.pids(f"services.{name}")
    assert blocking_unix_sockets(pid) == []


async def test_websocket_turn_through_the_real_processes(real_mesh: MeshProcess) -> None:
    events = await ws_turn(real_mesh, "e2e-1", "hello from the e2e test")
    assert events[-1]["type"] == "done" and events[-1]["status"] == "completed"
    assert [e["to_agent"] for e in events if e["type"] == "agent_switched"][-1] == "orchestrator"
    assert "".join(e.get("token", "") for e in events if e["type"] == "assistant_message")
    assert {e["session_id"] for e in events} == {"e2e-1"}
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


async def test_the_configured_upstream_is_called_with_streaming(real_mesh: MeshProcess) -> None:
    async with httpx.AsyncClient(base_url=real_mesh.model, timeout=10) as http:
        await http.delete("/_scripted/requests")
        await ws_turn(real_mesh, "e2e-2", "which upstream?")
        requests = (await http.get("/_scripted/requests")).json()
    assert requests and all(r["stream"] is True for r in requests)
    assert requests[-1]["messages"][-1]["content"] == "which upstream?"


async def test_grpc_without_the_internal_key_is_unauthenticated(real_mesh: MeshProcess) -> None:
    async with grpc.aio.insecure_channel(real_mesh.addr("orchestrator")) as channel:
        stub = runtime_pb2_grpc.AgentRuntimeStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListSessions(runtime_pb2.ListSessionsRequest())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_bad_input_then_a_good_message(real_mesh: MeshProcess) -> None:
    url = real_mesh.gateway.replace("http://", "ws://") + "/ws/e2e-bad"
    async with websockets.connect(url) as ws:
        await ws.send('{"type": "user_message"}')
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert (error["type"], error["error_code"]) == ("error", "MISSING_REQUIRED_FIELD")
        await ws.send(json.dumps({"type": "user_message", "content": "ok now"}))
        while (event := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] != "done":
            pass
    assert event["status"] == "completed"


async def test_services_export_prometheus_metrics(real_mesh: MeshProcess) -> None:
    port = int(real_mesh.addr("orchestrator").rsplit(":", 1)[1]) + METRICS_OFFSET
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        gateway = await http.get(f"{real_mesh.gateway}/health")
    assert 'codelab_grpc_calls_total{code="OK",method="Stream",service="orchestrator"}' in text
    assert "codelab_grpc_open_streams" in text
    assert gateway.json()["status"] == "healthy"


async def test_a_killed_service_is_restarted(real_mesh: MeshProcess) -> None:
    real_mesh.kill("services.llmproxy")
    async with asyncio.timeout(60):
        while True:
            if await serving(real_mesh.addr("llmproxy")):
                break
            await asyncio.sleep(0.2)
        while True:
            async with httpx.AsyncClient(timeout=5) as http:
                if (await http.get(f"{real_mesh.gateway}/health")).status_code == 200:
                    break
            await asyncio.sleep(0.2)
    events = await ws_turn(real_mesh, "e2e-restart", "are you back?")
    assert events[-1]["status"] == "completed"


async def test_sigterm_stops_everything_cleanly(real_mesh: MeshProcess) -> None:
    assert await real_mesh.stop() == 0
    for name in SERVICES:
        assert not await serving(real_mesh.addr(name))
