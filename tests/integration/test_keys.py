"""API keys stored hashed, managed under /admin/keys; the WebSocket's key out of the URL;
the browser origin allow-list."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
import websockets
from websockets.typing import Origin

from clients.python import MeshClient
from codelab.v1 import access_pb2
from services.common.asgi import running_asgi
from services.gateway import ws_auth
from services.gateway.app import create_app
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh

KEYS = {"k-alice-0123456789": "alice", "k-root-0123456789": "admin"}
ALICE = {"Authorization": "Bearer k-alice-0123456789"}
ROOT = {"Authorization": "Bearer k-root-0123456789"}
INTERNAL = {"X-Internal-Auth": INTERNAL_KEY}
USER_MESSAGE = json.dumps({"type": "user_message", "content": "hello"})


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(
        database_url,
        multi_agent_mode=False,
        gateway_api_keys=KEYS,
        gateway_cors_origins=("https://ide.example",),
    ) as running:
        yield running


@pytest.fixture
async def http(mesh: Mesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as client:
        yield client


@contextlib.asynccontextmanager
async def other_gateway(
    mesh: Mesh, cache_seconds: float
) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    """One more gateway on the mesh, with its own key cache TTL: (client, port)."""
    settings = dataclasses.replace(mesh.settings, gateway_key_cache_seconds=cache_seconds)
    app = create_app(settings, MeshClient.from_settings(settings))
    async with (
        running_asgi(app, lifespan="on") as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client,
    ):
        yield client, port


async def until_done(ws: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(20):
        while not events or events[-1]["type"] != "done":
            events.append(json.loads(await ws.recv()))
    return events


async def test_keys_are_created_listed_and_revoked_stored_as_hashes(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    created = await http.post(
        "/admin/keys", json={"user_id": "bob", "label": "laptop"}, headers=ROOT
    )
    assert created.status_code == 201, created.text
    key, record = created.json()["api_key"], created.json()["key"]
    assert key.startswith("ck_") and len(key) > 40
    assert record["user_id"] == "bob" and record["source"] == "admin"
    assert key.startswith(record["prefix"]) and len(record["prefix"]) <= 8
    bob = {"Authorization": f"Bearer {key}"}
    assert (await http.get("/sessions", headers=bob)).status_code == 200

    stored = await mesh.pool.fetch("select * from orchestrator.api_keys")
    assert key not in repr([dict(r) for r in stored])  # only the hash is kept
    assert hashlib.sha256(key.encode()).digest() in [bytes(r["key_sha256"]) for r in stored]

    listed = (await http.get("/admin/keys", headers=INTERNAL)).json()["keys"]
    assert {(k["user_id"], k["source"]) for k in listed} == {
        ("alice", "env"),
        ("admin", "env"),
        ("bob", "admin"),
    }
    assert all("api_key" not in k and "key_sha256" not in k for k in listed)

    revoked = await http.delete(f"/admin/keys/{record['key_id']}", headers=ROOT)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    refused = await http.get("/sessions", headers=bob)
    assert refused.status_code == 401 and refused.json()["error_code"] == "UNAUTHORIZED"
    assert (await http.get("/admin/keys", headers=ROOT)).json()["keys"] == listed[:2]
    everything = await http.get("/admin/keys?include_revoked=true&user_id=bob", headers=ROOT)
    assert [k["revoked_at"] is not None for k in everything.json()["keys"]] == [True]


async def test_key_admin_refusals(http: httpx.AsyncClient) -> None:
    assert (await http.get("/admin/keys")).status_code == 401
    assert (await http.get("/admin/keys", headers=ALICE)).status_code == 403
    for body in (
        {},
        {"user_id": 7},
        {"user_id": "has space"},
        {"user_id": "u", "label": 5},
        {"user_id": "u", "label": "x" * 201},
    ):
        bad = await http.post("/admin/keys", json=body, headers=ROOT)
        assert bad.status_code == 400 and bad.json()["error_code"] == "MISSING_REQUIRED_FIELD"
    missing = await http.delete("/admin/keys/key_nope", headers=ROOT)
    assert missing.status_code == 404
    flag = await http.get("/admin/keys?include_revoked=maybe", headers=ROOT)
    assert flag.status_code == 400


async def test_another_gateway_stops_a_revoked_key_within_its_cache_ttl(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    async with other_gateway(mesh, 0.2) as (other, _):
        assert (await other.get("/sessions", headers=ALICE)).status_code == 200
        alice = next(
            k
            for k in (await http.get("/admin/keys", headers=ROOT)).json()["keys"]
            if k["user_id"] == "alice"
        )
        await http.delete(f"/admin/keys/{alice['key_id']}", headers=ROOT)
        statuses = []
        for _ in range(200):  # the TTL is 0.2 s; a few polls are enough
            statuses.append((await other.get("/sessions", headers=ALICE)).status_code)
            if statuses[-1] == 401:
                break
            await asyncio.sleep(0.05)
        assert statuses[-1] == 401 and set(statuses) <= {200, 401}
    # Still listed in GATEWAY_API_KEYS, and still refused: revocation wins over seeding.
    assert (await http.get("/sessions", headers=ALICE)).status_code == 401


async def test_the_websocket_key_in_a_header_a_subprotocol_or_a_first_message(
    mesh: Mesh,
) -> None:
    url = mesh.ws_url("ws-keys")
    async with websockets.connect(url, additional_headers=ALICE) as ws:
        await ws.send(USER_MESSAGE)
        assert (await until_done(ws))[-1]["status"] == "completed"
    protocols: Any = ["codelab", "bearer.k-alice-0123456789"]
    async with websockets.connect(url, subprotocols=protocols) as ws:
        assert ws.subprotocol == "codelab"
        await ws.send(USER_MESSAGE)
        assert (await until_done(ws))[-1]["status"] == "completed"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "auth", "token": "k-alice-0123456789"}))
        await ws.send(USER_MESSAGE)
        assert (await until_done(ws))[-1]["status"] == "completed"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "auth", "token": "k-wrong"}))
        refused = json.loads(await ws.recv())
        assert refused["error_code"] == "UNAUTHORIZED"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    wrong: Any = ["codelab", "bearer.k-wrong"]
    with pytest.raises(websockets.exceptions.InvalidStatus):
        async with websockets.connect(url, subprotocols=wrong):
            pass
    owner = await mesh.pool.fetchval(
        "select user_id from orchestrator.sessions where session_id = 'ws-keys'"
    )
    assert owner == "alice"


async def test_a_key_in_the_query_string_works_but_is_never_logged(
    mesh: Mesh, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with websockets.connect(mesh.ws_url("ws-query", "token=k-alice-0123456789")) as ws:
        await ws.send(USER_MESSAGE)
        assert (await until_done(ws))[-1]["status"] == "completed"
    lines = [record.getMessage() for record in caplog.records]
    assert any("deprecated" in line and "?token=" in line for line in lines)
    assert any("WebSocket /ws/ws-query?token=[redacted]" in line for line in lines), lines
    assert not any("k-alice-0123456789" in line for line in lines)


async def test_browsers_from_listed_origins_only(mesh: Mesh, http: httpx.AsyncClient) -> None:
    listed = {"Origin": "https://ide.example"}
    preflight = await http.options(
        "/sessions",
        headers={
            **listed,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://ide.example"
    allowed = await http.get("/sessions", headers={**ALICE, **listed})
    assert allowed.headers["access-control-allow-origin"] == "https://ide.example"
    own = mesh.gateway_url  # the gateway's own pages (/playground) are same-origin
    assert (await http.get("/sessions", headers={**ALICE, "Origin": own})).status_code == 200
    foreign = await http.post(
        "/agent/message",
        json={"session_id": "csrf", "message": "hi"},
        headers={**ALICE, "Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403 and foreign.json()["error_code"] == "UNAUTHORIZED"
    assert "access-control-allow-origin" not in foreign.headers
    with pytest.raises(websockets.exceptions.InvalidStatus):
        async with websockets.connect(
            mesh.ws_url("csrf"), additional_headers=ALICE, origin=Origin("https://evil.example")
        ):
            pass
    async with websockets.connect(
        mesh.ws_url("ide-origin"), additional_headers=ALICE, origin=Origin("https://ide.example")
    ) as ws:
        await ws.send(USER_MESSAGE)
        assert (await until_done(ws))[-1]["status"] == "completed"


async def test_bad_hashes_are_refused_by_the_key_service(mesh: Mesh) -> None:
    access = mesh.client.access
    short = await access.CheckKey(access_pb2.CheckKeyRequest(key_sha256=b"short"))
    assert not short.known and not short.valid
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        seed = access_pb2.SeedKey(key_sha256=b"short", user_id="eve")
        await access.SeedKeys(access_pb2.SeedKeysRequest(keys=[seed]))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_key_cannot_be_checked_while_the_orchestrator_is_down(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws_auth, "AUTH_SECONDS", 0.2)
    async with websockets.connect(mesh.ws_url("silent")) as ws:  # no auth message in time
        assert json.loads(await ws.recv())["error_code"] == "UNAUTHORIZED"
    await mesh.servers["orchestrator"].stop(0)
    # A gateway starting while the orchestrator is away seeds its keys later, on first use.
    async with other_gateway(mesh, 0) as (http, port):
        down = await http.get("/sessions", headers=ALICE)
        assert down.status_code == 503 and down.json()["error_code"] == "SERVICE_UNAVAILABLE"
        with pytest.raises(websockets.exceptions.InvalidStatus):
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/x", additional_headers=ALICE):
                pass
