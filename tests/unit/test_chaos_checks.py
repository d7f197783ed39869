"""``make chaos``'s checks on made-up runs: each one can fail, and says so in the table."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from bench.chaos_checks import (
    CHECKS,
    Session,
    failed,
    figures,
    kills_figure,
    log_mismatches,
    session_checks,
    unhandled_figure,
)
from bench.mesh import unhandled_marker


def event(seq: int, kind: str = "assistant_message", **payload: Any) -> dict[str, Any]:
    return {"type": kind, **payload, "session_id": "s", "seq": seq, "timestamp": "t"}


LOG = {
    1: event(1, token="Hel"),
    2: event(2, "tool_call", call_id="c1", tool_name="read_file"),
    3: event(3, "done", status="completed"),
}


def clean_session() -> Session:
    session = Session("s", sent=["turn 0"], outcomes=["completed"], final="completed")
    for seq in sorted(LOG):
        session.saw(dict(LOG[seq]))
    session.saw(event(0, "tool_call", call_id="c1"))  # re-sent outside the log: not kept
    return session


def test_a_clean_session_passes_every_check() -> None:
    results = session_checks(clean_session(), LOG, ["turn 0"], round_trips=1)
    assert {name: results[name] for name in CHECKS} == dict.fromkeys(CHECKS, True)


def test_the_same_type_with_another_payload_is_a_mismatch() -> None:
    session = clean_session()
    session.seen[1] = event(1, token="Help")
    assert log_mismatches(session.seen, LOG) == [1]
    results = session_checks(session, LOG, ["turn 0"], round_trips=1)
    assert results["seen_equals_log"] is False and results["mismatched_seqs"] == [1]


def test_missing_doubled_and_gapped_events_fail() -> None:
    session = clean_session()
    del session.seen[2]
    assert log_mismatches(session.seen, LOG) == [2]
    doubled = clean_session()
    doubled.saw(dict(LOG[3]))
    assert doubled.doubled == 1
    assert session_checks(doubled, LOG, ["turn 0"], 1)["seen_equals_log"] is False
    gapped = {1: LOG[1], 3: LOG[3]}
    assert session_checks(clean_session(), gapped, ["turn 0"], 1)["no_gap"] is False


def test_no_tool_round_trip_a_doubled_message_or_a_bad_last_turn_fail() -> None:
    session = clean_session()
    assert session_checks(session, LOG, ["turn 0"], round_trips=0)["tool_round_trip"] is False
    twice = session_checks(session, LOG, ["turn 0", "turn 0"], 1)
    assert twice["user_messages_once"] is False
    session.final = "error"
    assert session_checks(session, LOG, ["turn 0"], 1)["clean_turn_after"] is False


def test_fewer_kills_than_asked_fail() -> None:
    made = ["gateway", "hitl", "gateway"]
    short = kills_figure(made, kills=4, seconds=12)
    assert short.unit == "FAIL" and short.data == {"asked": 4, "made": 3, "killed": made}
    assert short.value.startswith("3 of 4 in 12 s: ")
    assert "hitl 1" in short.value and "gateway 2" in short.value
    assert kills_figure(made, kills=3, seconds=12).unit == "pass"


def test_unhandled_exceptions_in_the_log_are_counted_and_fail() -> None:
    asgi = json.dumps(
        {"service": "gateway", "level": "error", "msg": "Exception in ASGI application"}
    )
    assert unhandled_marker(asgi) == "gateway: Exception in ASGI application"
    assert unhandled_marker("Task was destroyed but it is pending!") == (
        "?: Task was destroyed but it is pending"
    )
    assert unhandled_marker('["Task exception was never retrieved"]') == (
        "?: Task exception was never retrieved"
    )
    assert unhandled_marker(json.dumps({"service": "hitl", "msg": "is up"})) is None
    assert unhandled_figure(Counter()).unit == "pass"
    found = unhandled_figure(Counter({"gateway: Exception in ASGI application": 2}))
    assert found.unit == "FAIL" and "2 lines" in found.value


def test_the_table_fails_when_any_check_fails() -> None:
    good = session_checks(clean_session(), LOG, ["turn 0"], 1)
    table = figures({"s": good}, ["hitl"], 1, 5.0, Counter())
    assert not failed(table)
    assert [f.unit for f in table if f.name.startswith("check:")] == ["pass"] * (len(CHECKS) + 2)
    bad = session_checks(clean_session(), LOG, ["turn 0"], 0)
    assert failed(figures({"s": good, "t": bad}, ["hitl"], 1, 5.0, Counter()))
    assert failed(figures({"s": good}, ["hitl"], 1, 5.0, Counter({"?: x": 1})))
