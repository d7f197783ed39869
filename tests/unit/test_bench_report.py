"""The bench's table reads back as it was written: LATEST.md is data for other checks
(the Kubernetes resource requests are held against its memory figures)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.report import Figure, header, named_numbers, num, read_table, table, write_latest

FIGURES = [
    Figure(
        "Concurrency", "100 live: errors", "1 of 100 turns (first: a | b)", "errors", target="0"
    ),
    Figure(
        "Concurrency",
        "100 live: resident memory per session",
        " · ".join(f"{name} {num(kib)}" for name, kib in {"hitl": 1.0, "gateway": 1033.4}.items()),
        "KiB/session",
    ),
    Figure(
        "Soak",
        "resident memory: hitl",
        "start 54.2 · warm 54.0 · end 53.1 (end - warm -0.9)",
        "MiB",
    ),
    Figure("Soak", "resident memory: gateway", "start n/a · warm 117.0 · end 116.8", "MiB"),
]


def test_a_written_table_reads_back(tmp_path: Path) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC)
    info = {"nproc": "2", "ram": "1 GiB", "cpu": "x", "python": "3.11", "os": "Linux"}
    latest = tmp_path / "LATEST.md"
    write_latest(latest, f"{header(info, when, {'profile': 'full'})}\n\n{table(FIGURES)}", when)
    assert read_table(latest.read_text()) == FIGURES


def test_named_numbers_reads_values_as_they_are_printed() -> None:
    per_session, hitl, gateway = (named_numbers(f.value) for f in FIGURES[1:])
    assert per_session == {"hitl": 1.0, "gateway": 1033.4}
    assert hitl == {"start": 54.2, "warm": 54.0, "end": 53.1}  # not the remark's "warm -0.9"
    assert gateway == {"warm": 117.0, "end": 116.8}
    assert named_numbers("p50 1,045 · p99 -3") == {"p50": 1045.0, "p99": -3.0}
    assert named_numbers("8.31x") == {}
