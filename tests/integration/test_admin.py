"""Seed 003's admin REST through the in-process gateway: templates, tools, instances, search."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from tests.support.mesh import INTERNAL_KEY, Mesh, running_mesh

ADMIN = {"X-Internal-Auth": INTERNAL_KEY}
SEED_003_FIELDS = {
    "base_class", "llm_config", "execution_policy", "tool_policy", "prompt_pack",
    "multiagent_meta",
}  # fmt: skip
REVIEWER = {
    "name": "reviewer",
    "display_name": "Reviewer Agent",
    "description": "Reviews diffs for bugs and style",
    "prompt_pack": {"system_prompt": "You review code changes and point out bugs."},
    "tool_policy": {"allowed": ["read_file", "git.diff", "attempt_completion"]},
    "handoff": ["coder"],
    "multiagent_meta": {"capabilities": "code review of pull requests", "tags": ["review"]},
}


@pytest.fixture
async def mesh(database_url: str) -> AsyncIterator[Mesh]:
    """Single-agent mode: each scripted reply lands in the turn that asked for it."""
    async with running_mesh(database_url, multi_agent_mode=False) as running:
        yield running


@pytest.fixture
async def http(mesh: Mesh) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20, headers=ADMIN) as client:
        yield client


@pytest.fixture
async def multi(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        running_mesh(database_url) as running,
        httpx.AsyncClient(base_url=running.gateway_url, timeout=20, headers=ADMIN) as client,
    ):
        yield client


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["type"] == "error" and body["error_code"] == code and body["content"]
    return str(body["content"])


async def ws_turn(mesh: Mesh, sid: str, text: str) -> None:
    async with websockets.connect(mesh.ws_url(sid)) as ws:
        await ws.send(json.dumps({"type": "user_message", "content": text}))
        while json.loads(await ws.recv())["type"] != "done":
            pass


async def test_templates_carry_seed_003_fields(http: httpx.AsyncClient) -> None:
    templates = (await http.get("/admin/templates")).json()["templates"]
    by_name = {t["name"]: t for t in templates}
    assert set(by_name) == {
        "orchestrator", "coder", "architect", "debug", "ask", "universal", "conductor",
    }  # fmt: skip
    for template in templates:
        assert set(template["definition"]) >= SEED_003_FIELDS and template["active"]
        assert template["source"] == "builtin" and template["version"] >= 1
    assert by_name["universal"]["served"] and not by_name["coder"]["served"]  # single-agent
    assert by_name["architect"]["definition"]["file_restrictions"] == ["\\.md$"]
    assert by_name["coder"]["definition"]["tool_policy"]["allowed"] == ["*"]


async def test_versions_change_with_the_definition_and_reach_new_sessions(
    mesh: Mesh, http: httpx.AsyncClient
) -> None:
    current = (await http.get("/admin/templates/universal")).json()
    same = await http.post("/admin/templates", json=current["definition"])
    assert same.status_code == 200 and same.json()["changed"] is False
    assert same.json()["version"] == current["version"]
    prompt = "You are the Pirate assistant. Answer like a pirate."
    changed_definition = {**current["definition"], "prompt_pack": {"system_prompt": prompt}}
    bumped = await http.put("/admin/templates/universal", json=changed_definition)
    assert bumped.status_code == 201, bumped.text
    assert bumped.json()["version"] == current["version"] + 1 and bumped.json()["served"]
    old = (await http.get(f"/admin/templates/universal?version={current['version']}")).json()
    assert old["definition"] == current["definition"] and not old["served"]
    versions = await http.get("/admin/templates?all_versions=true&name=universal")
    assert [t["version"] for t in versions.json()["templates"]] == [
        current["version"] + 1, current["version"],
    ]  # fmt: skip
    mesh.scripted.enqueue({"text": "Arr."})
    await ws_turn(mesh, "admin-new-session", "hello")
    system = mesh.scripted.requests[-1]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(prompt)
    instances = (await http.get("/admin/instances?template=universal")).json()["instances"]
    assert {i["template_version"] for i in instances} == {current["version"] + 1}
    assert instances[0]["state"] == "IDLE"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"tool_policy": {"allowed": ["read_file", "teleport"]}}, "TOOL_VALIDATION_ERROR"),
        ({"tool_policy": {"allowed": ["*"], "required": ["teleport"]}}, "TOOL_VALIDATION_ERROR"),
        ({"prompt_pack": {"system_prompt": "   "}}, "MISSING_REQUIRED_FIELD"),
        ({"prompt_pack": {}}, "MISSING_REQUIRED_FIELD"),
        ({"name": "Bad Name!"}, "MISSING_REQUIRED_FIELD"),
        ({"handoff": ["nobody"]}, "AGENT_NOT_FOUND"),
        ({"tool_policy": {"allowed": ["agent.nobody"]}}, "AGENT_NOT_FOUND"),
        ({"execution_policy": {"max_iterations": 0}}, "MISSING_REQUIRED_FIELD"),
        ({"llm_config": {"temperature": 7}}, "MISSING_REQUIRED_FIELD"),
        ({"tool_policy": {"allowed": ["*"], "mode": "magic"}}, "MISSING_REQUIRED_FIELD"),
        ({"file_restrictions": ["(unclosed"]}, "FILE_RESTRICTION_ERROR"),
        ({"max_iteration": 3}, "MISSING_REQUIRED_FIELD"),
    ],
)
async def test_bad_definitions_are_refused_with_spec_codes(
    http: httpx.AsyncClient, change: dict[str, Any], code: str
) -> None:
    message = assert_error(
        await http.post("/admin/templates", json={**REVIEWER, **change}), 400, code
    )
    assert len(message) > 10
    listed = (await http.get("/admin/templates?include_inactive=true")).json()["templates"]
    assert "reviewer" not in {t["name"] for t in listed}


async def test_template_request_errors(http: httpx.AsyncClient) -> None:
    assert_error(await http.post("/admin/templates", content=b"{oops"), 400, "INVALID_MESSAGE")
    assert_error(await http.get("/admin/templates/ghost"), 404, "AGENT_NOT_FOUND")
    assert_error(await http.get("/admin/templates/ask?version=99"), 404, "AGENT_NOT_FOUND")
    assert_error(await http.get("/admin/templates/ask?version=x"), 400, "MISSING_REQUIRED_FIELD")
    assert_error(
        await http.put("/admin/templates/ghost", json=REVIEWER), 400, "MISSING_REQUIRED_FIELD"
    )
    renamed = {**REVIEWER, "name": "ghost"}
    assert_error(await http.put("/admin/templates/ghost", json=renamed), 404, "AGENT_NOT_FOUND")
    assert_error(await http.delete("/admin/templates/ghost"), 404, "AGENT_NOT_FOUND")
    assert_error(await http.delete("/admin/templates/universal"), 409, "AGENT_SWITCH_FAILED")


async def test_a_template_is_created_served_and_deactivated(multi: httpx.AsyncClient) -> None:
    created = await multi.post("/admin/templates", json=REVIEWER)
    assert created.status_code == 201, created.text
    assert created.json()["version"] == 1 and created.json()["source"] == "admin"
    assert created.json()["definition"]["base_class"] == "ToolCallingAgent"
    assert "reviewer" in {a["type"] for a in (await multi.get("/agents")).json()}
    instances = (await multi.get("/admin/instances?template=reviewer")).json()["instances"]
    assert [i["state"] for i in instances] == ["IDLE"]
    gone = await multi.delete("/admin/templates/reviewer")
    assert gone.json() == {"name": "reviewer", "active": False, "deactivated_versions": 1}
    assert (await multi.delete("/admin/templates/reviewer")).json()["deactivated_versions"] == 0
    assert "reviewer" not in {a["type"] for a in (await multi.get("/agents")).json()}
    assert (await multi.get("/admin/instances?template=reviewer")).json()["instances"] == []
    listed = (await multi.get("/admin/templates?include_inactive=true")).json()["templates"]
    assert {t["name"]: t["active"] for t in listed}["reviewer"] is False
    back = await multi.post("/admin/templates", json=REVIEWER)  # upserting again revives it
    assert back.status_code == 201 and back.json()["version"] == 2 and back.json()["active"]


async def test_agent_search_ranks_templates(multi: httpx.AsyncClient) -> None:
    found = await multi.post(
        "/admin/agents/search", json={"query": "investigate this stack trace error", "top_k": 3}
    )
    results = found.json()["results"]
    assert results[0]["name"] == "debug" and len(results) <= 3
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    design = await multi.post("/admin/agents/search", json={"query": "architecture design spec"})
    assert design.json()["results"][0]["name"] == "architect"
    nothing = await multi.post("/admin/agents/search", json={"query": "zzzz qqqq"})
    assert all(not r.get("matched_terms") for r in nothing.json()["results"])
    # The directory is toolsearch's hybrid retrieval: a Russian request finds the English
    # template by meaning (no word of it matches lexically).
    russian = await multi.post(
        "/admin/agents/search", json={"query": "найди причину ошибки в трассировке стека"}
    )
    top = russian.json()["results"][0]
    assert top["name"] == "debug" and top["score"] > 0
    missing = await multi.post("/admin/agents/search", json={"top_k": 3})
    assert_error(missing, 400, "MISSING_REQUIRED_FIELD")
    assert_error(
        await multi.post("/admin/agents/search", json={"query": "x", "top_k": 0}),
        400,
        "MISSING_REQUIRED_FIELD",
    )


LINT = {
    "name": "lint_python",
    "description": "Run the Python linter over a file and report style problems",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "type": "domain",
    "category": "quality",
    "tags": ["lint", "python"],
}


async def test_tools_are_imported_versioned_searched_and_deactivated(
    http: httpx.AsyncClient,
) -> None:
    first = (await http.post("/admin/tools", json=LINT)).json()
    assert first["tools"] == [{"name": "lint_python", "version": 1, "changed": True}]
    again = (await http.post("/admin/tools", json={"tools": [LINT]})).json()
    assert again["tools"] == [{"name": "lint_python", "version": 1, "changed": False}]
    fmt = {**LINT, "name": "format_python", "description": "Format Python code"}
    bulk = await http.post("/admin/tools", json={"tools": [{**LINT, "risk": "medium"}, fmt]})
    assert {t["name"]: t["version"] for t in bulk.json()["tools"]} == {
        "lint_python": 2, "format_python": 1,
    }  # fmt: skip
    tool = (await http.get("/admin/tools/lint_python")).json()
    assert tool["parameters"] == LINT["parameters"] and tool["risk"] == "medium"
    assert "lint_python" in {t["name"] for t in (await http.get("/admin/tools")).json()["tools"]}
    # A template may name the tool now that the catalog has it.
    linter = {**REVIEWER, "name": "linter", "tool_policy": {"allowed": ["lint_python"]}}
    assert (await http.post("/admin/templates", json=linter)).status_code == 201
    search = await http.post(
        "/admin/tools/search",
        json={"query": "lint python style", "top_k": 3, "filters": {"types": ["domain"]}},
    )
    assert search.status_code == 200, search.text
    results = search.json()["results"]
    assert results[0]["name"] == "lint_python" and results[0]["score"] > 0
    assert {"name", "score", "description", "version"} <= set(results[0])
    assert all(r["type"] == "domain" for r in results)
    gone = await http.delete("/admin/tools/format_python")
    assert gone.json() == {"name": "format_python", "active": False, "version": 2}
    assert_error(await http.get("/admin/tools/format_python"), 404, "TOOL_VALIDATION_ERROR")
    assert_error(await http.delete("/admin/tools/format_python"), 404, "TOOL_VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/admin/tools", {"name": "x_tool"}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools", {"tools": []}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools", {**LINT, "parameters": "nope"}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools", {**LINT, "colour": "red"}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools", {**LINT, "name": "9bad name"}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools", {**LINT, "risk": "extreme"}, "TOOL_VALIDATION_ERROR"),
        ("/admin/tools/search", {"top_k": 3}, "MISSING_REQUIRED_FIELD"),
        ("/admin/tools/search", {"query": "x", "top_k": 500}, "MISSING_REQUIRED_FIELD"),
        ("/admin/tools/search", {"query": "x", "filters": {"kind": []}}, "MISSING_REQUIRED_FIELD"),
    ],
)
async def test_bad_tool_requests_are_400(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], code: str
) -> None:
    assert_error(await http.post(path, json=body), 400, code)


async def test_admin_routes_need_an_admin(database_url: str) -> None:
    keys = {"k-alice": "alice", "k-root": "admin"}
    async with (
        running_mesh(database_url, multi_agent_mode=False, gateway_api_keys=keys) as mesh,
        httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http,
    ):
        assert_error(await http.get("/admin/templates"), 401, "UNAUTHORIZED")
        alice = {"Authorization": "Bearer k-alice"}
        assert_error(await http.get("/admin/templates", headers=alice), 403, "UNAUTHORIZED")
        refused = await http.post("/admin/templates", json=REVIEWER, headers=alice)
        assert_error(refused, 403, "UNAUTHORIZED")
        assert (await http.get("/agents", headers=alice)).status_code == 200
        root = {"Authorization": "Bearer k-root"}
        assert (await http.get("/admin/instances", headers=root)).status_code == 200
        assert (await http.get("/admin/tools", headers=ADMIN)).status_code == 200


async def test_without_api_keys_only_the_internal_key_is_admin(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=20) as http:
        assert_error(await http.get("/admin/templates"), 401, "UNAUTHORIZED")
        wrong = {"X-Internal-Auth": "not-the-key"}
        assert_error(await http.get("/admin/templates", headers=wrong), 401, "UNAUTHORIZED")
        assert (await http.get("/agents")).status_code == 200
