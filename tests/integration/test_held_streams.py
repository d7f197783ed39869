"""SSE requests of one session over a held Stream (services/gateway/held_streams.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import openai
import pytest
import websockets
from openai import AsyncOpenAI

from clients.python import MeshClient
from codelab.v1 import common_pb2 as common
from codelab.v1 import runtime_pb2
from services.common.asgi import running_asgi
from services.gateway.app import create_app
from services.gateway.held_streams import StreamHold, StreamReader
from tests.support.mesh import Mesh, running_mesh
from tests.support.runtime import until
from tests.support.sse import parse_sse

REUSED = "codelab_gateway_sse_streams_reused_total"


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def reused(http: httpx.AsyncClient) -> float:
    metrics = (await http.get("/metrics")).text
    line = next(x for x in metrics.splitlines() if x.startswith(REUSED + " "))
    return float(line.split()[1])


async def sse_turn(
    http: httpx.AsyncClient, session_id: str, content: str, **headers: str
) -> list[dict[str, Any]]:
    body = {"session_id": session_id, "message": {"type": "user_message", "content": content}}
    response = await http.post("/agent/message/stream", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return [json.loads(data) for _, data in parse_sse(response.text) if data.startswith("{")]


def said(frames: list[dict[str, Any]]) -> str:
    return "".join(f.get("token", "") for f in frames if f.get("type") == "assistant_message")


async def test_a_sessions_next_request_takes_its_held_stream(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "First answer."}, {"text": "Second answer."})
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        before = await reused(http)
        first = await sse_turn(http, "held-1", "one")
        second = await sse_turn(http, "held-1", "two")
        assert await reused(http) == before + 1
        third = await sse_turn(http, "held-other", "three")  # another session: a new stream
        assert await reused(http) == before + 1
    assert said(first) == "First answer." and said(second) == "Second answer."
    assert first[-1]["status"] == second[-1]["status"] == "completed"
    assert third[-1]["status"] == "completed"
    seqs = [f["seq"] for f in first + second if "seq" in f]
    assert seqs == sorted(set(seqs))  # one session's log, in order, nothing twice


async def test_what_happens_while_held_is_not_heard_by_the_next_request(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Over SSE."}, {"text": "Over the socket."}, {"text": "Again."})
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        await sse_turn(http, "held-2", "one")
        async with websockets.connect(mesh.ws_url("held-2")) as ws:
            await ws.send(json.dumps({"type": "user_message", "content": "meanwhile"}))
            while (event := json.loads(await ws.recv()))["type"] != "done":
                pass
        socket_done = event["seq"]
        later = await sse_turn(http, "held-2", "two")
    assert said(later) == "Again."
    assert min(f["seq"] for f in later if "seq" in f) > socket_done


async def test_another_users_request_never_takes_the_held_stream(mesh: Mesh) -> None:
    keys = {"k-alice": "alice", "k-bob": "bob"}
    settings = dataclasses.replace(mesh.settings, gateway_api_keys=keys)
    mesh.scripted.enqueue({"text": "For alice."})
    app = create_app(settings, MeshClient.from_settings(settings))
    async with running_asgi(app, lifespan="on") as port:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            frames = await sse_turn(http, "held-3", "mine", Authorization="Bearer k-alice")
            assert said(frames) == "For alice." and len(app.state.held_streams) == 1
            body = {"session_id": "held-3", "message": "and mine?"}
            refused = await http.post(
                "/agent/message/stream", json=body, headers={"Authorization": "Bearer k-bob"}
            )
    assert len(app.state.held_streams) == 0  # closed with the gateway
    codes = [json.loads(d).get("error_code") for _, d in parse_sse(refused.text)]
    assert refused.status_code == 404 or "SESSION_NOT_FOUND" in codes, refused.text
    assert "For alice." not in refused.text


async def held_reader(mesh: Mesh, session_id: str) -> StreamReader:
    """A reader whose stream is attached to ``session_id`` and read (as a request's is)."""
    reader = StreamReader(await mesh.client.open_stream(session_id))
    reader.start()
    return reader


async def test_a_held_stream_that_ends_is_forgotten(mesh: Mesh) -> None:
    hold = StreamHold()
    reader = await held_reader(mesh, "held-4")
    assert hold.give_back("held-4", "", reader)
    await mesh.servers["orchestrator"].stop(0)  # the stream ends while held

    async def forgotten() -> bool:
        return len(hold) == 0

    await until(forgotten)
    assert hold.take("held-4", "") is None
    await hold.close()


async def test_a_held_stream_is_closed_when_not_taken_in_time_or_pushed_out(
    mesh: Mesh,
) -> None:
    hold = StreamHold(seconds=0.2, most=1)
    late = await held_reader(mesh, "held-5")
    assert hold.give_back("held-5", "", late)
    assert not hold.give_back("held-5", "", await held_reader(mesh, "held-5"))  # one per key
    await asyncio.sleep(0.4)
    assert hold.take("held-5", "") is None and late.ended
    first, second = await held_reader(mesh, "held-6"), await held_reader(mesh, "held-7")
    hold.seconds = 30
    assert hold.give_back("held-6", "", first) and hold.give_back("held-7", "", second)
    assert hold.take("held-6", "") is None  # pushed out by the newer one
    taken = hold.take("held-7", "")
    assert taken is second and taken.queue is not None
    await taken.aclose()
    await hold.close()
    assert first.task is not None and first.task.done()


async def test_a_message_for_a_held_stream_that_ended_unnoticed_goes_on_a_new_one(
    mesh: Mesh,
) -> None:
    mesh.scripted.enqueue({"text": "Sent once."})
    hold = StreamHold()
    stale = StreamReader(await mesh.client.open_stream("held-8"))  # not read: its end unseen
    assert hold.give_back("held-8", "", stale)
    stale.stream.close()
    opened: list[str] = []

    async def new_stream(first: common.ClientMessage) -> Any:
        opened.append(first.user_message.content)
        return await mesh.client.open_stream("held-8", first=first)  # the message with it

    message = common.ClientMessage(user_message=common.UserMessage(content="hello"))
    reader = await hold.send("held-8", "", message, new_stream)
    assert reader is not stale and opened == ["hello"]
    reader.start()
    assert reader.queue is not None
    seen: list[str] = []
    while (item := await asyncio.wait_for(reader.queue.get(), 10)) is not None:
        assert not isinstance(item, Exception)
        seen.append(item.WhichOneof("event") or "")
        if item.HasField("done"):
            break
    assert "assistant_message" in seen and seen[-1] == "done"
    history = await mesh.pool.fetchval(
        "select count(*) from orchestrator.messages where session_id = 'held-8' and role = 'user'"
    )
    assert history == 1
    await reader.aclose()
    await hold.close()


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def session_of(completion: Any) -> str:
    session_id = (completion.model_extra or {})["session_id"]
    assert isinstance(session_id, str) and session_id
    return session_id


async def test_a_v1_request_that_continues_a_session_takes_its_held_stream(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "One, two and three: all of them counted, one by one."})
    mesh.scripted.enqueue({"text": "Four."}, {"text": "Five."})
    base = mesh.gateway_url + "/v1"
    async with (
        httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http,
        AsyncOpenAI(base_url=base, api_key="k", max_retries=0, timeout=10) as sdk,
    ):
        before = await reused(http)
        template = (await sdk.models.list()).data[0].id  # the entry agent, in single-agent mode
        first = await sdk.chat.completions.create(model=template, messages=ask("count"))
        session_id = session_of(first)
        options: Any = {"include_usage": True}
        stream = await sdk.chat.completions.create(
            model=session_id, messages=ask("and on?"), stream=True, stream_options=options
        )
        chunks = [chunk async for chunk in stream]
        header = {"X-CodeLab-Session": session_id}
        third = await sdk.chat.completions.create(
            model=template, messages=ask("more"), extra_headers=header
        )
        assert await reused(http) == before + 2
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Four."
    assert third.choices[0].message.content == "Five." and session_of(third) == session_id
    usage, earlier = chunks[-1].usage, first.usage
    assert usage is not None and earlier is not None
    # This request's model call only, not the session's: the first answer was longer.
    assert 0 < usage.completion_tokens < earlier.completion_tokens


async def test_a_deleted_sessions_held_stream_is_not_taken(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "Kept."}, {"text": "Never said."})
    base = mesh.gateway_url + "/v1"
    async with (
        httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http,
        AsyncOpenAI(base_url=base, api_key="k", max_retries=0, timeout=10) as sdk,
    ):
        template = (await sdk.models.list()).data[0].id
        first = await sdk.chat.completions.create(model=template, messages=ask("x"))
        session_id = session_of(first)
        deleted = await http.delete(f"/sessions/{session_id}")
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        with pytest.raises(openai.NotFoundError) as caught:
            await sdk.chat.completions.create(model=session_id, messages=ask("again"))
    assert caught.value.code == "AGENT_NOT_FOUND"


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
async def test_a_session_deleted_elsewhere_while_held_is_an_unknown_model(
    mesh: Mesh, stream: bool
) -> None:
    """Deleted through the orchestrator (as another gateway replica would): the held stream's
    turn is refused, and the request is answered as if it had not been held."""
    mesh.scripted.enqueue({"text": "Kept."}, {"text": "Never said."})
    base = mesh.gateway_url + "/v1"
    async with AsyncOpenAI(base_url=base, api_key="k", max_retries=0, timeout=10) as sdk:
        template = (await sdk.models.list()).data[0].id
        session_id = session_of(
            await sdk.chat.completions.create(model=template, messages=ask("x"))
        )
        await mesh.client.runtime.DeleteSession(
            runtime_pb2.GetSessionRequest(session_id=session_id)
        )
        if stream:  # past the response's start: the error is a chunk
            chunks = await sdk.chat.completions.create(
                model=session_id, messages=ask("again"), stream=True
            )
            with pytest.raises(openai.APIError) as caught:
                _ = [chunk async for chunk in chunks]
        else:
            with pytest.raises(openai.NotFoundError) as caught:
                await sdk.chat.completions.create(model=session_id, messages=ask("again"))
        assert caught.value.code == "AGENT_NOT_FOUND"
        assert f"The model '{session_id}' is neither" in caught.value.message
        # Not held again: the next request is checked, and refused before it starts.
        with pytest.raises(openai.NotFoundError) as again:
            await sdk.chat.completions.create(model=session_id, messages=ask("and?"), stream=stream)
    assert again.value.code == "AGENT_NOT_FOUND"


async def test_a_v1_request_that_fails_leaves_no_held_stream(mesh: Mesh) -> None:
    app = create_app(mesh.settings, MeshClient.from_settings(mesh.settings))
    async with running_asgi(app, lifespan="on") as port:
        base = f"http://127.0.0.1:{port}/v1"
        async with AsyncOpenAI(base_url=base, api_key="k", max_retries=0, timeout=10) as sdk:
            template = (await sdk.models.list()).data[0].id
            overloaded = {"error": {"status": 503, "message": "overloaded"}, "times": 6}
            mesh.scripted.enqueue(overloaded)
            with pytest.raises(openai.APIStatusError):
                await sdk.chat.completions.create(model=template, messages=ask("hi"))
            mesh.scripted.enqueue(overloaded)
            stream = await sdk.chat.completions.create(
                model=template, messages=ask("hi"), stream=True
            )
            with pytest.raises(openai.APIError):
                _ = [chunk async for chunk in stream]
            assert len(app.state.held_streams) == 0
            mesh.scripted.enqueue({"text": "Fine."})
            await sdk.chat.completions.create(model=template, messages=ask("hi"))
            assert len(app.state.held_streams) == 1


@pytest.mark.parametrize("pumped", [True, False], ids=["through its queue", "read directly"])
async def test_a_streams_failure_reaches_whoever_reads_its_events(mesh: Mesh, pumped: bool) -> None:
    reader = StreamReader(await mesh.client.open_stream(f"held-9-{pumped}"))
    if pumped:
        reader.start()  # a held stream taken by a request is read by its task
    await mesh.servers["orchestrator"].stop(0)
    with pytest.raises(grpc.aio.AioRpcError):
        async with asyncio.timeout(10):
            async for _ in reader.events():
                pass
    await reader.aclose()
