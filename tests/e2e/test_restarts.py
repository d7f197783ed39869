"""kill -9 of any service at its worst moment, a whole-mesh restart, a replica's death (the
last over plaintext and over mutual TLS)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from services.common.ports import free_port
from services.common.settings import Settings
from services.common.tls import MeshTls
from tests.e2e.conftest import MeshProcess, mesh_env
from tests.support.certs import make_certs
from tests.support.databases import clone_database, drop_database

pytestmark = pytest.mark.e2e
Event = dict[str, Any]
SLOW = " ".join(f"t{i}" for i in range(120))


@contextlib.asynccontextmanager
async def started(pg_template: str, **extra: str) -> AsyncIterator[MeshProcess]:
    dsn = await clone_database(pg_template)
    running = MeshProcess(mesh_env(dsn, MULTI_AGENT_MODE="false", HITL_TIMEOUT="600", **extra))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()
        await drop_database(pg_template, dsn)


@pytest.fixture(scope="module")
async def mesh(pg_template: str) -> AsyncIterator[MeshProcess]:
    async with started(pg_template) as running:
        yield running


@pytest.fixture(scope="module")
async def mtls_mesh(
    pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MeshProcess]:
    """The same mesh with mutual TLS on every gRPC link (GRPC_TLS_* in every process)."""
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    tls = {"GRPC_TLS_CERT": certs.cert, "GRPC_TLS_KEY": certs.key, "GRPC_TLS_CA": certs.ca}
    async with started(pg_template, **{name: str(path) for name, path in tls.items()}) as running:
        yield running


async def script(mesh: MeshProcess, *scenarios: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=mesh.model, timeout=10) as http:
        response = await http.post("/_scripted/scenarios", json={"scenarios": list(scenarios)})
        assert response.status_code == 200


async def healthy(mesh: MeshProcess) -> None:
    """Until the gateway says every service is SERVING again."""
    async with asyncio.timeout(60), httpx.AsyncClient(timeout=5) as http:
        while True:
            try:
                if (await http.get(f"{mesh.gateway}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)


class Client:
    """An IDE that reconnects with the last seq it saw, as the protocol asks."""

    def __init__(self, mesh: MeshProcess, sid: str) -> None:
        self.mesh, self.sid = mesh, sid
        self.ws: Any = None
        self.seen: list[Event] = []

    async def connect(self) -> None:
        last = self.seen[-1]["seq"] if self.seen else None
        query = f"?last_event_id={last}" if last is not None else ""
        async with asyncio.timeout(60):
            while True:
                try:
                    self.ws = await websockets.connect(f"{self.mesh.ws}/ws/{self.sid}{query}")
                    return
                except (OSError, websockets.exceptions.InvalidStatus):
                    await asyncio.sleep(0.3)

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def next(self) -> Event:
        event: Event = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
        if event.get("seq"):  # seq 0: outside the log (a tool_call sent again)
            self.seen.append(event)
        return event

    async def until_done(self) -> list[Event]:
        events = []
        while True:
            event = await self.next()
            events.append(event)
            if event["type"] == "done":
                return events

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    def assert_exactly_once(self) -> None:
        seqs = [e["seq"] for e in self.seen]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def tool_calls(events: list[Event]) -> list[Event]:
    return [e for e in events if e["type"] == "tool_call"]


async def test_orchestrator_killed_mid_stream(mesh: MeshProcess) -> None:
    await script(
        mesh,
        {"match": "talk slowly", "text": SLOW, "token_delay_ms": 40},
        {"match": "are you there", "text": "Back again."},
    )
    client = Client(mesh, "kill-orch-stream")
    await client.connect()
    await client.send({"type": "user_message", "content": "talk slowly"})
    for _ in range(5):
        await client.next()
    mesh.kill("services.orchestrator")
    await healthy(mesh)
    await client.connect()
    events = await client.until_done()
    assert "LLM_STREAM_INTERRUPTED" in [e.get("error_code") for e in events]
    await client.send({"type": "user_message", "content": "are you there?"})
    after = await client.until_done()
    await client.close()
    assert "".join(e.get("token", "") for e in after) == "Back again."
    client.assert_exactly_once()


@pytest.mark.parametrize("victim", ["services.orchestrator", "services.gateway"])
async def test_a_pending_tool_call_survives(mesh: MeshProcess, victim: str) -> None:
    sid = f"kill-tool-{victim.rsplit('.', 1)[1]}"
    prompt = f"read a.py for {sid}"
    await script(
        mesh,
        {"match": prompt, "tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
        {"match": prompt, "text": "Got the file."},
    )
    client = Client(mesh, sid)
    await client.connect()
    await client.send({"type": "user_message", "content": prompt})
    (call,) = tool_calls(await client.until_done())
    mesh.kill(victim)
    await healthy(mesh)
    await client.connect()
    await client.send({"type": "tool_result", "call_id": call["call_id"], "result": "print(1)"})
    events = await client.until_done()
    await client.close()
    assert "".join(e.get("token", "") for e in events) == "Got the file."
    client.assert_exactly_once()


@pytest.mark.parametrize("victim", ["services.orchestrator", "services.hitl"])
async def test_a_pending_approval_survives(mesh: MeshProcess, victim: str) -> None:
    sid = f"kill-approval-{victim.rsplit('.', 1)[1]}"
    prompt = f"write a.py for {sid}"
    write = {"name": "write_file", "arguments": {"path": "a.py", "content": "x"}}
    await script(mesh, {"match": prompt, "tool_calls": [write]})
    client = Client(mesh, sid)
    await client.connect()
    await client.send({"type": "user_message", "content": prompt})
    (ask,) = tool_calls(await client.until_done())
    assert ask["requires_approval"] is True
    mesh.kill(victim)
    await healthy(mesh)
    await client.connect()
    await client.send({"type": "hitl_decision", "call_id": ask["call_id"], "decision": "approve"})
    (go,) = tool_calls(await client.until_done())
    await client.close()
    assert (go["call_id"], go["requires_approval"]) == (ask["call_id"], False)


async def test_llmproxy_killed_mid_stream(mesh: MeshProcess) -> None:
    await script(
        mesh,
        {"match": "speak slowly", "text": SLOW, "token_delay_ms": 40},
        {"match": "once more", "text": "Recovered."},
    )
    client = Client(mesh, "kill-llmproxy")
    await client.connect()
    await client.send({"type": "user_message", "content": "speak slowly"})
    for _ in range(5):
        await client.next()
    mesh.kill("services.llmproxy")
    events = await client.until_done()
    assert "LLM_STREAM_INTERRUPTED" in [e.get("error_code") for e in events]
    await healthy(mesh)
    await client.send({"type": "user_message", "content": "once more"})
    after = await client.until_done()
    await client.close()
    assert "".join(e.get("token", "") for e in after) == "Recovered."


async def test_a_whole_mesh_restart_keeps_history_and_pending_work(mesh: MeshProcess) -> None:
    await script(
        mesh,
        {
            "match": "read kept.py",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "kept.py"}}],
        },
        {
            "match": "write w.py",
            "tool_calls": [{"name": "write_file", "arguments": {"path": "w.py", "content": "x"}}],
        },
    )
    tool, approval = Client(mesh, "restart-tool"), Client(mesh, "restart-approval")
    for client, text in ((tool, "read kept.py"), (approval, "write w.py")):
        await client.connect()
        await client.send({"type": "user_message", "content": text})
    (call,) = tool_calls(await tool.until_done())
    (ask,) = tool_calls(await approval.until_done())
    assert await mesh.stop() == 0
    await mesh.start()
    await script(mesh, {"match": "read kept.py", "text": "After the restart."})  # model restarted
    async with httpx.AsyncClient(base_url=mesh.gateway, timeout=10) as http:
        history = (await http.get("/sessions/restart-tool/history")).json()
        pending = (await http.get("/sessions/restart-approval/pending-approvals")).json()
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
    assert [p["call_id"] for p in pending["pending_approvals"]] == [ask["call_id"]]
    await tool.connect()
    await tool.send({"type": "tool_result", "call_id": call["call_id"], "result": "ok"})
    done = await tool.until_done()
    assert "".join(e.get("token", "") for e in done) == "After the restart."
    await approval.connect()
    await approval.send({"type": "hitl_decision", "call_id": ask["call_id"], "decision": "reject"})
    rejected = await approval.until_done()
    assert rejected[-1]["type"] == "done" and not tool_calls(rejected)
    for client in (tool, approval):
        await client.close()
        client.assert_exactly_once()


@pytest.fixture(params=["mesh", "mtls_mesh"], ids=["plaintext", "mtls"])
def either_mesh(request: pytest.FixtureRequest) -> MeshProcess:
    mesh: MeshProcess = request.getfixturevalue(request.param)
    return mesh


async def test_a_second_replica_takes_over_when_the_owner_is_killed(
    either_mesh: MeshProcess,
) -> None:
    from clients.python import MeshClient
    from codelab.v1 import common_pb2 as pb

    mesh = either_mesh
    await healthy(mesh)
    address = f"127.0.0.1:{free_port()}"
    env = {**mesh.env, "ORCHESTRATOR_ADDR": address, "METRICS_PORT_OFFSET": "0"}
    del env["GATEWAY_PORT"]  # not part of the supervised mesh: mesh.kill must spare it
    replica = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.orchestrator",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    # The replica's own settings: with GRPC_TLS_* the survivor speaks mutual TLS like it.
    survivor = MeshClient(
        internal_api_key=mesh.env["INTERNAL_API_KEY"],
        orchestrator_addr=address,
        tls=MeshTls.from_settings(Settings.from_env(env)),
    )
    try:
        async with asyncio.timeout(60):
            while True:
                if (await survivor.health()).get("orchestrator") == "SERVING":
                    break
                await asyncio.sleep(0.2)
        await script(
            mesh,
            {
                "match": "read r.py",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "r.py"}}],
            },
            {"match": "read r.py", "text": "Finished by the survivor."},
        )
        client = Client(mesh, "replica-takeover")  # through the gateway: the first replica
        await client.connect()
        await client.send({"type": "user_message", "content": "read r.py"})
        (call,) = tool_calls(await client.until_done())
        await client.close()
        mesh.kill("services.orchestrator")  # the owner dies; the supervisor restarts it too
        async with await survivor.open_stream("replica-takeover") as stream:
            await stream.send(
                pb.ClientMessage(
                    tool_result=pb.ToolResult(call_id=call["call_id"], result_json='"r"')
                )
            )
            async with asyncio.timeout(30):
                events = await stream.until_done()
        text = "".join(e.assistant_message.token for e in events)
        assert text == "Finished by the survivor."
    finally:
        await survivor.close()
        replica.kill()
        await replica.wait()
