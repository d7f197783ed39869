"""``make chaos``'s per-session check against a real session: a clean one passes it all."""

from __future__ import annotations

from bench.chaos import check
from bench.chaos_checks import CHECKS, Session
from tests.support.ide import ide, of
from tests.support.mesh import Mesh


async def test_a_clean_session_with_a_tool_round_trip_passes_every_check(
    mesh: Mesh, database_url: str
) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}]},
        {"text": "Read it."},
    )
    session = Session("chaos-check", sent=["please read main.py"], final="completed")
    async with ide(mesh, session.session_id) as client:
        first = await client.say("please read main.py", agent_type="coder")
        (call,) = of(first, "tool_call")
        second = await client.result(call["call_id"], "ok")
    session.answered.add(call["call_id"])
    for event in first + second:
        session.saw(event)
    results = await check(database_url, session)
    assert {name: results[name] for name in CHECKS} == dict.fromkeys(CHECKS, True), results
    assert results["tool_round_trips"] == 1
    session.answered.clear()  # the IDE answered nothing: no round trip
    assert (await check(database_url, session))["tool_round_trip"] is False
    session.seen[max(session.seen)]["status"] = "cancelled"  # a payload the log does not hold
    assert (await check(database_url, session))["seen_equals_log"] is False
