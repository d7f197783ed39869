"""Seed 003's records of a session: executions, sources read, artifacts produced."""

from __future__ import annotations

import httpx

from tests.support.ide import ide, of
from tests.support.mesh import Mesh


async def test_reads_become_sources_and_confirmed_writes_artifacts(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "src/app.py"}}]},
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "docs/notes.md", "content": "# Notes"}}
            ]
        },
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "rejected.py", "content": "x"}}
            ]
        },
        {"text": "Done."},
    )
    async with ide(mesh, "records") as client:
        read = of(await client.say("work", agent_type="coder"), "tool_call")[0]
        ask = of(await client.result(read["call_id"], "print(1)"), "tool_call")[0]
        go = of(await client.decide(ask["call_id"], "approve"), "tool_call")[0]
        second = of(await client.result(go["call_id"], {"ok": True}), "tool_call")[0]
        await client.decide(second["call_id"], "reject")
    async with httpx.AsyncClient(base_url=mesh.gateway_url, timeout=10) as http:
        body = (await http.get("/sessions/records/records")).json()
        missing = await http.get("/sessions/nobody/records")
    records = body["records"]
    assert [(s["kind"], s["locator"]) for s in records["sources"]] == [("file", "src/app.py")]
    assert [(a["kind"], a["path"], a["bytes"]) for a in records["artifacts"]] == [
        ("file", "docs/notes.md", 7)
    ]
    states = [(e["tool_name"], e["state"]) for e in records["executions"]]
    assert states == [
        ("read_file", "completed"),
        ("write_file", "completed"),
        ("write_file", "rejected"),
    ]
    assert records["executions"][0]["arguments"] == {"path": "src/app.py"}
    assert missing.status_code == 404
