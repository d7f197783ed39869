"""The paced level's figure: each session's pace against the pace the model's own stream
for it kept (from the model's stream log), beside the share of the nominal pace; of
several rounds, the one with the median p5, beside every round's p5 and every error."""

from __future__ import annotations

import math
import os

from pytest import approx

from bench.report import Figure
from bench.sessions import Turn
from bench.throughput import Level, _paced_figure, median_round, own_paces


def turn(first: float, last: float, tokens: int = 101) -> Turn:
    return Turn(tokens=tokens, events=tokens, first_token_s=first, last_token_s=last)


def stream(session: str, first: float, last: float, writes: int = 101) -> dict[str, object]:
    return {
        "last_user": f"bench-paced {session}",
        "writes": writes,
        "first_at": first,
        "last_at": last,
    }


def test_a_session_is_matched_to_its_own_stream_not_one_whose_id_it_begins() -> None:
    streams = [stream("s-71-9", 0.0, 4.0), stream("s-7-9", 10.0, 12.0)]
    assert own_paces(["s-7-9", "s-71-9", "s-8-9"], streams) == [50.0, 25.0, None]


def test_the_mesh_is_judged_by_the_pace_the_model_itself_kept() -> None:
    # Session a: the model sent its 100 gaps in 2.0 s (its nominal 50 tokens/s), the IDE
    # saw them in 2.0 s. Session b: the model fell behind (2.5 s: 40 tokens/s) and the IDE
    # saw them in 2.5 s: the mesh kept all of b's pace, the IDE saw 80 % of the nominal.
    level = Level([turn(0.3, 2.3), turn(0.3, 2.8)], [], 3.0, sessions=["a-1", "b-1"])
    streams = [stream("a-1", 100.0, 102.0), stream("b-1", 100.0, 102.5)]
    figure = _paced_figure(2, 50.0, 50.0, level, streams)
    assert figure.data["kept_p50"] == approx(100.0) and figure.data["kept_p5"] == approx(100.0)
    # p5 of two sessions, 100 % and 80 %, by linear interpolation.
    assert figure.data["kept_of_nominal_p5"] == approx(81.0)
    assert figure.data["model_kept_p5"] == approx(81.0)
    assert figure.value.startswith("p50 100.0 · p5 100.0 of the model's own pace")
    assert figure.target == ">= 95 % at 100 sessions"


def test_the_figure_says_in_how_many_token_events_an_answer_came() -> None:
    joined = Turn(tokens=101, events=21, first_token_s=0.3, last_token_s=2.3)
    alone = Turn(tokens=101, events=101, first_token_s=0.3, last_token_s=2.3)
    failed = Turn(tokens=3, events=3, error="TIMEOUT: no done")
    level = Level([joined, joined, alone, failed], [], 3.0, sessions=["a", "b", "c", "d"])
    figure = _paced_figure(4, 50.0, 50.0, level, [])
    assert figure.data["events_p50"] == 21.0  # the failed turn is not an answer
    assert "; token events per answer p50 21" in figure.value


def test_a_stream_the_model_did_not_log_is_left_out_not_counted_as_kept() -> None:
    level = Level([turn(0.3, 2.3), turn(0.3, 4.3)], [], 5.0, sessions=["a-1", "b-1"])
    figure = _paced_figure(2, 50.0, 50.0, level, [stream("a-1", 0.0, 2.0)])
    assert figure.data["streams_logged"] == 1
    assert figure.data["kept_p5"] == approx(100.0)
    assert figure.data["kept_of_nominal_p5"] == approx(52.5)
    nothing = _paced_figure(2, 50.0, 50.0, level, [])
    assert math.isnan(nothing.data["kept_p50"]) and nothing.data["streams_logged"] == 0


def test_a_round_says_what_it_asked_of_the_cores_the_mesh_apart_from_the_model_and_bench() -> None:
    cores = os.cpu_count() or 1
    cpu = {"orchestrator": 1.0, "postgres": 0.5, "scripted_model": 0.25, "bench client": 0.25}
    level = Level([turn(0.3, 2.3)], [], 2.0, cpu=cpu, sessions=["a-1"])
    figure = _paced_figure(1, 50.0, 50.0, level, [stream("a-1", 0.0, 2.0)])
    busy = 2.0 / (2.0 * cores) * 100
    assert figure.data["busy_pct"] == approx(busy)
    assert figure.value.endswith(
        "; token events per answer p50 101; the round: "
        f"the {cores} cores {busy:.0f} % busy over 2.00 s"
        " (CPU s: mesh 1.50 · scripted_model 0.25 · bench client 0.25)"
    )
    bare = Level([turn(0.3, 2.3)], [], 2.0, sessions=["a-1"])
    unmeasured = _paced_figure(1, 50.0, 50.0, bare, [])
    assert unmeasured.data["busy_pct"] is None and "the round" not in unmeasured.value


def test_the_median_round_lists_how_busy_the_cores_were_in_every_round() -> None:
    rounds = [round_of(99.0, busy=91.2), round_of(91.0, busy=99.6), round_of(96.0, busy=95.0)]
    figure = median_round(rounds)
    assert figure.value == (
        "p5 96 (median of 3 rounds by p5: 99.0, 91.0, 96.0; the cores busy 91, 100, 95 %)"
    )
    assert figure.data["rounds_busy_pct"] == [91.2, 99.6, 95.0]


def round_of(p5: float, errors: list[str] | None = None, busy: float | None = None) -> Figure:
    errors = errors or []
    data = {"kept_p5": p5, "errors": len(errors), "first_errors": errors[:3], "busy_pct": busy}
    return Figure("Streaming throughput", "pace kept", f"p5 {p5:g}", "%", data, "t")


def test_the_median_round_is_shown_with_every_rounds_p5_and_every_error() -> None:
    rounds = [round_of(99.0), round_of(91.0, ["TIMEOUT: no done"]), round_of(96.0)]
    figure = median_round(rounds)
    assert figure.value == (
        "p5 96 (median of 3 rounds by p5: 99.0, 91.0, 96.0), 1 errors (first: TIMEOUT: no done)"
    )
    assert figure.data["rounds_p5"] == [99.0, 91.0, 96.0]
    assert figure.data["errors"] == 1 and figure.data["first_errors"] == ["TIMEOUT: no done"]
    assert figure.target == "t"


def test_a_round_without_a_p5_counts_as_the_lowest_and_one_round_is_shown_alone() -> None:
    # An even count takes the lower middle: nan (lowest), 95, 97, 99 -> 95.
    rounds = [round_of(99.0), round_of(math.nan), round_of(95.0), round_of(97.0)]
    assert median_round(rounds).value.startswith("p5 95 (median of 4 rounds")
    assert median_round([round_of(98.0)]).value == "p5 98"
