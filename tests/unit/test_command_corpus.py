"""The labelled command corpus: every dangerous line asks, false alarms stay under 5 %."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.commands
from bench.commands import (
    FALSE_ALARM_TARGET,
    Labelled,
    judge,
    load,
    measure,
    score,
)

DANGEROUS = load("dangerous")
EVERYDAY = load("everyday")


def test_the_corpus_is_large_distinct_and_explained() -> None:
    assert len(DANGEROUS) >= 150 and len(EVERYDAY) >= 150
    commands = [row.command for row in DANGEROUS + EVERYDAY]
    assert len(set(commands)) == len(commands), "a line is labelled twice"
    assert all(row.why for row in DANGEROUS + EVERYDAY)


@pytest.mark.parametrize("row", DANGEROUS, ids=lambda row: row.where)
def test_every_dangerous_line_needs_a_human(row: Labelled) -> None:
    decision = judge(row.command)
    assert decision.requires_approval, f"{row.command!r} ({row.why}) ran unasked"
    assert decision.reason and ": " in decision.reason  # names the rule that fired


def test_false_alarms_on_everyday_lines_stay_within_the_target() -> None:
    result = score()
    assert result.recall == 100.0
    rate = result.false_alarm_rate
    alarms = [f"{row.command} -> {judge(row.command).reason}" for row in result.alarms]
    assert rate <= FALSE_ALARM_TARGET, f"{rate:.1f} % false alarms:\n" + "\n".join(alarms)


def test_everyday_lines_that_run_name_their_allow_list_entries() -> None:
    decision = judge("git status && pytest -q | tail -5")
    assert decision.reason == "Read-only allow-list: git status, pytest, tail"


async def test_the_bench_section_prints_both_figures_beside_their_targets() -> None:
    recall, alarms = await measure()
    assert recall.name == f"recall on {len(DANGEROUS)} dangerous lines"
    assert recall.value.startswith("100.0 (") and recall.unit == "%"
    assert recall.target == "100 %"
    assert alarms.target == "<= 5 %" and alarms.data["target"] == FALSE_ALARM_TARGET


def test_a_malformed_corpus_line_is_reported_with_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.commands, "CORPUS", tmp_path)
    (tmp_path / "broken.tsv").write_text("# header\nls -la\n")
    with pytest.raises(ValueError, match=r"broken\.tsv:2"):
        load("broken")
