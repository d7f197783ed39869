"""Every error code of the protos that a path produces, seen from outside (seeds 000/001).

Postgres failures are real: a trigger refuses a write, a renamed column breaks a read, a
closed port refuses a connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from clients.python.ide import GatewayUnreachable, connect_ide
from services.common.db import create_pool
from services.common.errors import DatabaseError
from services.common.ports import free_port
from tests.support.ide import ide, of
from tests.support.mesh import Mesh, running_mesh


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url) as running:
        yield running


async def refuse_inserts(mesh: Mesh, table: str) -> None:
    """Make Postgres itself refuse every insert into ``table``."""
    await mesh.pool.execute(
        "create function public.refuse_insert() returns trigger language plpgsql as"
        " $$ begin raise exception 'disk full (simulated)'; end $$"
    )
    await mesh.pool.execute(
        f"create trigger refuse before insert on {table}"
        " for each row execute function public.refuse_insert()"
    )


async def first_error(ws: Any) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await ws.recv())
        if event["type"] == "error":
            return event


async def test_a_session_postgres_will_not_create_is_session_creation_failed(
    mesh: Mesh,
) -> None:
    await refuse_inserts(mesh, "orchestrator.sessions")
    async with websockets.connect(mesh.ws_url("never-made")) as ws:
        error = await first_error(ws)
    assert error["error_code"] == "SESSION_CREATION_FAILED"
    assert "disk full" in error["content"]


async def test_a_refused_write_mid_turn_is_db_write_error(mesh: Mesh) -> None:
    async with ide(mesh, "write-refused") as client:
        await refuse_inserts(mesh, "orchestrator.messages")
        events = await client.say("hello", agent_type="ask")
    assert [e["error_code"] for e in of(events, "error")] == ["DB_WRITE_ERROR"]
    assert events[-1]["status"] == "error"


async def test_a_failed_read_is_db_read_error(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "hi"})
    async with ide(mesh, "read-fails") as client:
        await client.say("hello", agent_type="ask")
    await mesh.pool.execute("alter table orchestrator.messages rename column content to body")
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.get("/sessions/read-fails/history")
    assert response.status_code == 503, response.text
    assert response.json()["error_code"] == "DB_READ_ERROR"


async def test_postgres_out_of_reach_is_db_connection_error() -> None:
    dsn = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    with pytest.raises(DatabaseError, match="cannot connect") as failure:
        await create_pool(dsn, attempts=1)
    assert failure.value.code == "DB_CONNECTION_ERROR"


async def test_a_result_for_an_unknown_call_is_tool_call_not_found(mesh: Mesh) -> None:
    async with ide(mesh, "no-such-call") as client:
        events = await client.result("call_nobody", {"content": "x"})
    (error,) = of(events, "error")
    assert error["error_code"] == "TOOL_CALL_NOT_FOUND" and "call_nobody" in error["content"]
    assert events[-1]["status"] == "error"


async def test_a_failed_classification_is_reported_and_keywords_route(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"error": {"status": 400, "message": "bad request"}}, {"text": "ok"})
    async with ide(mesh, "classify-fails") as client:
        events = await client.say("Why does this traceback happen? There is an error in main.py")
    (error,) = of(events, "error")
    assert error["error_code"] == "CLASSIFICATION_FAILED"
    assert error["details"] == {"fallback": "keywords"}
    assert of(events, "agent_switched")[0]["to_agent"] == "debug"
    assert events[-1]["status"] == "completed"


async def test_an_ide_that_cannot_reach_the_gateway_gets_gateway_unreachable() -> None:
    with pytest.raises(GatewayUnreachable, match="cannot reach the gateway") as failure:
        await connect_ide(f"http://127.0.0.1:{free_port()}", "s", open_timeout=5)
    assert failure.value.code == "GATEWAY_UNREACHABLE"


async def test_a_service_that_is_down_is_service_unavailable(mesh: Mesh) -> None:
    await mesh.servers["orchestrator"].stop(0)
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        response = await http.get("/sessions")
    assert response.status_code == 503, response.text
    assert response.json()["error_code"] == "SERVICE_UNAVAILABLE"
