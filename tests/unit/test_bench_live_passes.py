"""The live pass runs several times; the table shows the pass with the median ratio, every
pass's ratio beside it, and the errors of every pass (none is hidden by the choice)."""

from __future__ import annotations

from bench.concurrency import CPU_UNIT, SECTION, _growth, median_pass
from bench.report import Figure

LATENCY = "1,000 live WebSockets, turn with a tool round trip (paced): turn latency"
ERRORS = "1,000 live WebSockets, turn with a tool round trip (paced): errors"


def one_pass(low_ms: float, high_ms: float, errors: list[str]) -> list[Figure]:
    """A pass's figures as ``_pass`` makes them: errors, latency, then the ratio."""
    count = f"{len(errors)} of 1,000 turns"
    return [
        Figure(
            SECTION,
            ERRORS,
            count,
            "errors",
            {"errors": len(errors), "first": errors, "turns": 1000},
            "0",
        ),
        Figure(SECTION, LATENCY, f"p50 {high_ms:g}", "ms", {"p50": high_ms}),
        *_growth({100: low_ms, 1000: high_ms}, paced=True),
    ]


def test_the_median_pass_is_shown_with_every_ratio_and_every_error() -> None:
    passes = [
        one_pass(2000, 5000, []),  # 2.5x
        one_pass(2000, 3000, ["TIMEOUT: no done"]),  # 1.5x
        one_pass(2000, 3800, []),  # 1.9x: the median
    ]
    errors, latency, ratio = median_pass(passes)
    assert latency.value == "p50 3800" and latency.data == {"p50": 3800}
    assert ratio.value == "1.90x (median of 3 passes: 2.50x, 1.50x, 1.90x)"
    assert ratio.data["passes"] == [2.5, 1.5, 1.9] and ratio.target == "<= 2x (1,000 over 100)"
    assert errors.data == {"errors": 1, "first": ["TIMEOUT: no done"], "turns": 3000}
    assert errors.value.startswith("1 of 3,000 turns over 3 passes")
    assert "TIMEOUT: no done" in errors.value


def test_one_pass_is_shown_as_it_is() -> None:
    only = one_pass(2000, 4400, [])
    assert median_pass([only]) == only
    assert only[2].value == "2.20x"


def test_an_even_count_shows_the_lower_middle() -> None:
    _, latency, ratio = median_pass([one_pass(2000, 5000, []), one_pass(2000, 3000, [])])
    assert latency.value == "p50 3000" and ratio.value.startswith("1.50x (median of 2")


def cpu_row(sessions: int, busy: float) -> Figure:
    """A level's CPU row as ``_pass`` makes it (the value's text is not read back)."""
    data = {"sessions": sessions, "busy_pct": busy}
    return Figure(SECTION, f"{sessions} cpu", "...", CPU_UNIT, data)


def test_each_pass_says_how_busy_the_cores_were_at_its_largest_level() -> None:
    passes = [
        [cpu_row(1000, 97.4), cpu_row(100, 20.0), *one_pass(2000, 5000, [])],
        [cpu_row(100, 21.0), cpu_row(1000, 88.6), *one_pass(2000, 3800, [])],
    ]
    figures = median_pass(passes)
    ratio = next(f for f in figures if f.unit == "ratio")
    assert ratio.value == (
        "1.90x (median of 2 passes: 2.50x, 1.90x; the cores busy at 1,000: 97, 89 %)"
    )
    assert ratio.data["passes_busy_pct"] == [97.4, 88.6]
    # The shown pass's own CPU rows stay as they were.
    assert [f.data["busy_pct"] for f in figures if f.unit == CPU_UNIT] == [21.0, 88.6]
