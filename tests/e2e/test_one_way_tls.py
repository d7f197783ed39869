"""One-way TLS between the real processes: GRPC_TLS_CERT and GRPC_TLS_KEY without
GRPC_TLS_CA. Servers speak TLS and ask for no client certificate; clients check servers
against gRPC's default roots, pointed at the test CA by GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
as a cluster with a private CA would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clients.python.ide import open_ide, text_of
from tests.e2e.conftest import MeshProcess, mesh_env
from tests.support.certs import CertFiles, make_certs
from tests.support.databases import clone_database, drop_database

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
async def mesh(pg_template: str, certs: CertFiles) -> AsyncIterator[MeshProcess]:
    dsn = await clone_database(pg_template)
    tls = {
        "GRPC_TLS_CERT": certs.cert,
        "GRPC_TLS_KEY": certs.key,
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": certs.ca,
    }
    env = mesh_env(dsn, MULTI_AGENT_MODE="false", **{k: str(v) for k, v in tls.items()})
    env.pop("GRPC_TLS_CA", None)  # one way: nothing inherited turns it mutual
    running = MeshProcess(env)
    await running.start()  # "is up": the supervisor's TLS health checks passed
    yield running
    await running.stop()
    await drop_database(pg_template, dsn)


async def script(mesh: MeshProcess, *scenarios: dict[str, object]) -> None:
    async with httpx.AsyncClient(base_url=mesh.model, timeout=10) as http:
        response = await http.post("/_scripted/scenarios", json={"scenarios": list(scenarios)})
        assert response.status_code == 200


async def test_a_turn_crosses_every_link_over_one_way_tls(mesh: MeshProcess) -> None:
    write = {"name": "write_file", "arguments": {"path": "w.py", "content": "x = 1"}}
    await script(
        mesh,
        {"match": "write w.py", "tool_calls": [write]},
        {"match": "write w.py", "text": "Written over TLS."},
    )
    async with open_ide(mesh.gateway, "one-way") as ide:
        await ide.user_message("write w.py")
        asked = await ide.until_done()  # gateway -> orchestrator -> llmproxy, hitl
        (ask,) = [e for e in asked if e["type"] == "tool_call"]
        assert ask["requires_approval"] is True
        await ide.decide(ask["call_id"], "approve")
        (go,) = [e for e in await ide.until_done() if e["type"] == "tool_call"]
        await ide.tool_result(go["call_id"], "written")
        answer = await ide.until_done()
    assert text_of(answer) == "Written over TLS."
    assert answer[-1]["status"] == "completed"


async def check(address: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.aio.secure_channel(address, credentials)
        if credentials is not None
        else grpc.aio.insecure_channel(address)
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(reply.status)


@pytest.mark.parametrize("name", ["orchestrator", "toolsearch", "hitl", "llmproxy"])
async def test_each_port_wants_tls_and_no_client_certificate(
    mesh: MeshProcess, certs: CertFiles, name: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as plaintext:
        await check(mesh.addr(name), None)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    anonymous = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    assert await check(mesh.addr(name), anonymous) == health_pb2.HealthCheckResponse.SERVING
