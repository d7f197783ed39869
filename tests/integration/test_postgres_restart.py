"""The mesh survives a Postgres restart: health goes NOT_SERVING and comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc

from codelab.v1 import common_pb2 as pb
from services.common.db import create_pool
from services.common.embedded_pg import start_embedded
from services.common.runner import migrate
from tests.support.databases import ALL_MIGRATIONS
from tests.support.ide import ide, of, text_of
from tests.support.mesh import running_mesh


async def status(address: str) -> int:
    import grpc

    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=2
        )
        return int(reply.status)


async def wait_for(address: str, wanted: int) -> None:
    async with asyncio.timeout(30):
        while True:
            if await status(address) == wanted:
                return
            await asyncio.sleep(0.2)


async def test_a_postgres_restart_is_survived(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_embedded, tmp_path / "pg")
    try:
        pool = await create_pool(server.dsn)
        await migrate(pool, ALL_MIGRATIONS)
        await pool.close()
        async with running_mesh(server.dsn, multi_agent_mode=False, gateway=False) as mesh:
            address = mesh.settings.orchestrator_addr
            assert await status(address) == health_pb2.HealthCheckResponse.SERVING
            await asyncio.to_thread(server.handle.stop)
            await wait_for(address, health_pb2.HealthCheckResponse.NOT_SERVING)
            await asyncio.to_thread(server.handle.ensure_postgres_running)
            await wait_for(address, health_pb2.HealthCheckResponse.SERVING)
            mesh.scripted.enqueue({"text": "Still here."})
            async with asyncio.timeout(20):
                async with await mesh.client.open_stream("after-restart") as stream:
                    await stream.send(pb.ClientMessage(user_message=pb.UserMessage(content="hi")))
                    events = await stream.until_done()
            text = "".join(e.assistant_message.token for e in events)
            assert text == "Still here."
    finally:
        server.stop()


async def test_a_stream_is_told_while_postgres_is_away_and_served_after(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_embedded, tmp_path / "pg")
    try:
        pool = await create_pool(server.dsn)
        await migrate(pool, ALL_MIGRATIONS)
        await pool.close()
        async with running_mesh(server.dsn, multi_agent_mode=False) as mesh:
            address = mesh.settings.orchestrator_addr
            async with ide(mesh, "pg-away") as client:
                mesh.scripted.enqueue({"text": "Before."})
                assert text_of(await client.say("hello")) == "Before."
                await asyncio.to_thread(server.handle.stop)
                await wait_for(address, health_pb2.HealthCheckResponse.NOT_SERVING)
                told = await client.say("are you there?", client_message_id="m-2")
                errors = of(told, "error")
                assert errors, told
                assert errors[0]["error_code"] in {
                    "DB_CONNECTION_ERROR",
                    "DB_WRITE_ERROR",
                    "DB_READ_ERROR",
                }
                assert errors[0]["client_message_id"] == "m-2"
                assert told[-1]["status"] == "error"
                await asyncio.to_thread(server.handle.ensure_postgres_running)
                await wait_for(address, health_pb2.HealthCheckResponse.SERVING)
                mesh.scripted.enqueue({"text": "After."})
                # Never applied, so the same id is accepted now, on the same socket.
                again = await client.say("are you there?", client_message_id="m-2")
                assert text_of(again) == "After."
                assert again[-1]["status"] == "completed"
    finally:
        server.stop()
