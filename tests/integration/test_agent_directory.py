"""The agent directory for agents (seed 003 section 7.1): routing beyond the six, the
agent_search tool and the shipped conductor that delegates with agent.*."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.support.ide import ide, of, text_of
from tests.support.mesh import INTERNAL_KEY, Mesh

TRANSLATOR = {
    "name": "translator",
    "description": "Translates documentation and interface strings between human languages",
    "prompt_pack": {"system_prompt": "You translate text between languages."},
    "tool_policy": {"allowed": ["read_file", "attempt_completion"]},
    "multiagent_meta": {
        "capabilities": "translation of texts, localisation of interface strings",
        "tags": ["translate", "translation", "localisation", "german"],
    },
}


async def add_translator(mesh: Mesh) -> None:
    async with httpx.AsyncClient(
        base_url=mesh.gateway_url, headers={"X-Internal-Auth": INTERNAL_KEY}, timeout=20
    ) as admin:
        created = await admin.post("/admin/templates", json=TRANSLATOR)
        assert created.status_code == 201, created.text


def calls(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_a_template_added_by_an_admin_is_offered_to_the_router(mesh: Mesh) -> None:
    await add_translator(mesh)
    route = {"agent": "translator", "confidence": "high", "reason": "a translation"}
    mesh.scripted.enqueue({"text": json.dumps(route)}, {"text": "Übersetzt."})
    async with ide(mesh, "route-extra") as client:
        events = await client.say("Translate the interface strings into German")
    prompt = mesh.scripted.requests[0]["messages"][-1]["content"]
    assert "- translator: Translates documentation" in prompt
    assert of(events, "agent_switched")[0]["to_agent"] == "translator"
    assert text_of(events) == "Übersetzt." and events[-1]["status"] == "completed"


async def test_without_the_model_the_directory_routes_what_keywords_do_not(mesh: Mesh) -> None:
    await add_translator(mesh)
    mesh.scripted.enqueue({"error": {"status": 400, "message": "no"}}, {"text": "Übersetzt."})
    async with ide(mesh, "route-directory") as client:
        events = await client.say("Translate the interface strings into German")
    switch = of(events, "agent_switched")[0]
    assert switch["to_agent"] == "translator" and switch["reason"].startswith("agent directory")
    method = await mesh.pool.fetchval(
        "select method from orchestrator.agent_switches where session_id = 'route-directory'"
        " order by id limit 1"
    )
    assert method == "directory"


async def test_the_conductor_finds_an_agent_and_delegates_to_it(mesh: Mesh) -> None:
    await add_translator(mesh)
    mesh.scripted.enqueue(
        calls("agent_search", {"query": "translate strings into German", "top_k": 3}),
        calls("agent_translator", {"task": "Translate 'Save' into German"}),
        {"text": "Speichern"},
        {"text": "The translator says: Speichern."},
    )
    async with ide(mesh, "conduct") as client:
        events = await client.say("Get the Save button translated", agent_type="conductor")
    first = mesh.scripted.requests[0]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"agent_search", "agent_translator", "agent_coder"} <= offered
    found = json.loads(mesh.scripted.requests[1]["messages"][-1]["content"])
    assert found[0]["name"] == "translator" and found[0]["tool"] == "agent.translator"
    assert text_of(events).endswith("The translator says: Speichern.")
    assert of(events, "execution_completed")[0]["summary"] == "Speichern"
    assert events[-1]["status"] == "completed"


async def test_every_active_template_gets_its_directory_vector(mesh: Mesh) -> None:
    await add_translator(mesh)
    async with asyncio.timeout(30):
        while True:
            rows = await mesh.pool.fetch(
                "select name, vector_dims(embedding) as dims from orchestrator.agent_templates"
                " where active"
            )
            if all(r["dims"] is not None for r in rows):
                break
            await asyncio.sleep(0.1)
    assert {r["name"] for r in rows} >= {"coder", "conductor", "translator"}
    assert {r["dims"] for r in rows} == {384}
    nearest = await mesh.pool.fetchval(
        "select b.name from orchestrator.agent_templates a, orchestrator.agent_templates b"
        " where a.name = 'translator' and b.name <> 'translator' and b.active"
        " order by a.embedding <=> b.embedding limit 1"
    )
    assert nearest  # the column is usable by SQL: pgvector orders by cosine distance
