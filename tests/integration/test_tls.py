"""TLS between the services (mutual with GRPC_TLS_CA, one way without) and on the gateway,
with certificates made in the test; the plaintext health-only port for kubelet probes.
(tests/e2e/test_one_way_tls.py runs a whole mesh over one-way TLS.)"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import websockets
from grpc_health.v1 import health_pb2, health_pb2_grpc

from codelab.v1 import hitl_pb2, hitl_pb2_grpc
from services.common import healthcheck
from services.common.channels import internal_channel
from services.common.db import Pool
from services.common.ports import free_port
from services.common.tls import MeshTls
from services.hitl import server as hitl
from tests.support.certs import CertFiles, make_certs
from tests.support.mesh import INTERNAL_KEY, Mesh, base_settings, running_mesh


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_certs(tmp_path / "certs")


@pytest.fixture
async def mesh(database_url: str, certs: CertFiles) -> AsyncIterator[Mesh]:
    async with running_mesh(
        database_url,
        multi_agent_mode=False,
        grpc_tls_cert=certs.cert,
        grpc_tls_key=certs.key,
        grpc_tls_ca=certs.ca,
        gateway_tls_cert=certs.cert,
        gateway_tls_key=certs.key,
    ) as running:
        yield running


def trusting(certs: CertFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca))


async def check(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(reply.status)


async def test_a_turn_over_wss_through_a_mutual_tls_mesh(mesh: Mesh, certs: CertFiles) -> None:
    assert mesh.gateway_url.startswith("https://")
    mesh.scripted.enqueue({"text": "Encrypted all the way."})
    async with websockets.connect(mesh.ws_url("tls-1"), ssl=trusting(certs)) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": "hi", "role": "user"}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "done":
            events.append(json.loads(await ws.recv()))
    tokens = "".join(e.get("token", "") for e in events if e["type"] == "assistant_message")
    assert tokens == "Encrypted all the way." and events[-1]["status"] == "completed"
    async with httpx.AsyncClient(base_url=mesh.gateway_url, verify=trusting(certs)) as http:
        health = await http.get("/health")
    assert health.status_code == 200 and set(health.json()["services"].values()) == {"SERVING"}


async def test_a_plaintext_client_is_refused(mesh: Mesh) -> None:
    async with grpc.aio.insecure_channel(mesh.settings.orchestrator_addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await check(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_a_client_without_a_certificate(
    mesh: Mesh, certs: CertFiles
) -> None:
    anonymous = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    async with grpc.aio.secure_channel(mesh.settings.hitl_addr, anonymous) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await check(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_a_certificate_from_another_ca(
    mesh: Mesh, certs: CertFiles, tmp_path: Path
) -> None:
    stranger = make_certs(tmp_path / "stranger", label="stranger")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=stranger.key.read_bytes(),
        certificate_chain=stranger.cert.read_bytes(),
    )
    async with grpc.aio.secure_channel(mesh.settings.llmproxy_addr, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await check(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_member_of_the_mesh_is_served(mesh: Mesh) -> None:
    statuses = await mesh.client.health()
    assert statuses == dict.fromkeys(statuses, "SERVING") and len(statuses) == 4


async def test_the_health_port_is_plaintext_and_serves_health_alone(
    pool: Pool, certs: CertFiles
) -> None:
    health_port = free_port()
    settings = base_settings(
        "http://127.0.0.1:9/v1",
        grpc_tls_cert=certs.cert,
        grpc_tls_key=certs.key,
        grpc_tls_ca=certs.ca,
        grpc_health_port=health_port,
    )
    server, _ = await hitl.build(settings, pool, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{health_port}") as channel:
            assert await check(channel) == health_pb2.HealthCheckResponse.SERVING
            alive = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="liveness")
            )
            assert alive.status == health_pb2.HealthCheckResponse.SERVING
            stub = hitl_pb2_grpc.HitlStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as other:
                await stub.ListPending(
                    hitl_pb2.ListPendingRequest(session_id="s"),
                    metadata=(("x-internal-auth", INTERNAL_KEY),),
                )
        assert other.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # The container health check asks the same port.
        assert await healthcheck.serving(f"127.0.0.1:{health_port}")
    finally:
        await server.stop(0)
    assert not await healthcheck.serving(f"127.0.0.1:{health_port}")
    assert healthcheck.main([]) == 2


async def test_one_way_tls_checks_the_server_against_the_default_roots(
    pool: Pool, certs: CertFiles
) -> None:
    """Without GRPC_TLS_CA a client trusts gRPC's default roots (grpcio's public CAs here:
    this process sets no GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), so a private CA's server is
    refused; a client that trusts the CA is served without showing a certificate."""
    settings = base_settings(
        "http://127.0.0.1:9/v1", grpc_tls_cert=certs.cert, grpc_tls_key=certs.key
    )
    server, port = await hitl.build(settings, pool, "127.0.0.1:0")
    await server.start()
    try:
        tls = MeshTls.from_settings(settings)
        assert tls is not None and not tls.mutual
        channel = internal_channel(f"127.0.0.1:{port}", INTERNAL_KEY, tls)  # as a peer would
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await check(channel)
        await channel.close()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        trusting_ca = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", trusting_ca) as trusted:
            assert await check(trusted) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)
