"""Seed 003: a task runs on the template versions it started with; an edit reaches the next."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.ide import ide, of, text_of
from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh
from tests.support.sessions import settled_session


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


async def test_an_edit_while_a_turn_waits_on_a_tool_result_reaches_only_the_next_task(
    mesh: Mesh,
) -> None:
    pirate = "You are the Pirate assistant. Answer like a pirate."
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}]},
        {"text": "Old version finished."},
        {"text": "Arr."},
    )
    async with (
        httpx.AsyncClient(
            base_url=mesh.gateway_url, headers={"X-Internal-Auth": INTERNAL_KEY}, timeout=20
        ) as admin,
        ide(mesh, "pinned") as client,
    ):
        first = await client.say("show main.py")
        (call,) = of(first, "tool_call")
        assert first[-1]["status"] == "awaiting_tool_result"
        old = (await admin.get("/admin/templates/universal")).json()
        definition = {**old["definition"], "prompt_pack": {"system_prompt": pirate}}
        edited = await admin.put("/admin/templates/universal", json=definition)
        assert edited.status_code == 201 and edited.json()["served"], edited.text

        finished = await client.result(call["call_id"], {"content": "print('hi')"})
        assert text_of(finished) == "Old version finished."
        assert finished[-1]["status"] == "completed"
        resumed = mesh.scripted.requests[-1]["messages"][0]["content"]
        assert resumed.startswith(old["definition"]["prompt_pack"]["system_prompt"])
        assert pirate not in resumed

        await client.say("hello again")
    assert mesh.scripted.requests[-1]["messages"][0]["content"].startswith(pirate)
    session = await settled_session(mesh.pool, "pinned")
    assert session["agent_versions"] == {}  # the finished task let its versions go
