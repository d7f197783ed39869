"""The checks of ``make chaos``: pure functions over what each IDE saw and sent, what
Postgres holds and what the mesh logged, and the table rows they become.

Per session: no gap in the log; what the IDE saw equals the log, event for event (type
and payload, as the gateway renders a logged event); every user message once, in order;
at least one tool round trip (a ``tool_result`` from the IDE applied); a clean turn after
the kills. For the run: the kills asked for were made, and the mesh's log has no
unhandled exception (``UNHANDLED``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.mesh import UNHANDLED
from bench.report import Figure

SECTION = "Chaos"
VICTIMS = ("orchestrator", "llmproxy", "hitl", "toolsearch", "gateway")
CHECKS = ("no_gap", "seen_equals_log", "user_messages_once", "tool_round_trip", "clean_turn_after")
Event = dict[str, Any]


@dataclass
class Session:
    """One IDE: what it sent, what it saw, how its turns ended."""

    session_id: str
    sent: list[str] = field(default_factory=list)
    seen: dict[int, Event] = field(default_factory=dict)
    """seq -> the event as received (seq 0 events are outside the log)."""
    doubled: int = 0
    """Events received twice (the same seq)."""
    answered: set[str] = field(default_factory=set)
    """Call ids of the tool calls the IDE sent a result for."""
    outcomes: list[str] = field(default_factory=list)
    reconnects: int = 0
    final: str = ""

    @property
    def last_seq(self) -> int:
        return max(self.seen, default=0)

    def saw(self, event: Event) -> None:
        """Keep one received event (by seq; seq 0 is not in the log)."""
        seq = int(event.get("seq") or 0)
        if seq:
            self.doubled += seq in self.seen
            self.seen[seq] = event


def log_mismatches(seen: Mapping[int, Event], logged: Mapping[int, Event]) -> list[int]:
    """The seqs where the IDE's event differs from the logged one in type or payload, or
    where one side has an event the other lacks."""
    return sorted(seq for seq in seen.keys() | logged.keys() if seen.get(seq) != logged.get(seq))


def session_checks(
    session: Session, logged: Mapping[int, Event], users: Sequence[str], round_trips: int
) -> dict[str, Any]:
    """Every check of one session; ``logged`` is its log rendered as the IDE sees events,
    ``users`` its stored user messages in order, ``round_trips`` how many of the calls
    the IDE answered the ledger holds as completed (the IDE's result applied)."""
    seqs = sorted(logged)
    mismatched = log_mismatches(session.seen, logged)
    return {
        "no_gap": seqs == list(range(1, len(seqs) + 1)),
        "seen_equals_log": not mismatched and session.doubled == 0,
        "user_messages_once": list(users) == session.sent,
        "tool_round_trip": round_trips > 0,
        "clean_turn_after": session.final == "completed",
        "mismatched_seqs": mismatched[:20],
        "events": len(seqs),
        "tool_round_trips": round_trips,
        "turns": len(session.outcomes),
        "turns_in_error": session.outcomes.count("error"),
        "reconnects": session.reconnects,
    }


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def kills_figure(killed: Sequence[str], kills: int, seconds: float) -> Figure:
    """The kills made, per process, against the ``kills`` asked for (fewer fails)."""
    counts = ", ".join(f"{name} {killed.count(name)}" for name in VICTIMS)
    return Figure(
        SECTION,
        "check: processes killed (SIGKILL), of KILLS",
        f"{len(killed)} of {kills} in {seconds:.0f} s: {counts}",
        verdict(len(killed) >= kills),
        {"asked": kills, "made": len(killed), "killed": list(killed)},
    )


def unhandled_figure(unhandled: Counter[str]) -> Figure:
    """Lines of the mesh's log that show an unhandled exception (any fails)."""
    found = sum(unhandled.values())
    listed = "; ".join(f"{line} x{n}" for line, n in unhandled.most_common(3))
    return Figure(
        SECTION,
        "check: no unhandled exception in the mesh's log (" + ", ".join(UNHANDLED) + ")",
        f"{found} lines" + (f": {listed}" if listed else ""),
        verdict(found == 0),
        dict(unhandled),
    )


def figures(
    results: Mapping[str, Mapping[str, Any]],
    killed: Sequence[str],
    kills: int,
    seconds: float,
    unhandled: Counter[str],
) -> list[Figure]:
    """The table: the kills, the turns, one row per session check, the log check."""
    turns = sum(r["turns"] for r in results.values())
    errors = sum(r["turns_in_error"] for r in results.values())
    reconnects = sum(r["reconnects"] for r in results.values())
    out = [
        kills_figure(killed, kills, seconds),
        Figure(
            SECTION,
            "turns during the kills (ended in error)",
            f"{turns} ({errors})",
            "turns",
            {"turns": turns, "errors": errors, "reconnects": reconnects, "sessions": results},
        ),
    ]
    for name in CHECKS:
        passed = [sid for sid, r in results.items() if r[name]]
        out.append(
            Figure(
                SECTION,
                f"check: {name.replace('_', ' ')}",
                f"{len(passed)} of {len(results)} sessions",
                verdict(len(passed) == len(results)),
                {sid: r[name] for sid, r in results.items()},
            )
        )
    out.append(unhandled_figure(unhandled))
    return out


def failed(found: Sequence[Figure]) -> bool:
    """Whether any check of the table failed."""
    return any(figure.unit == "FAIL" for figure in found)
