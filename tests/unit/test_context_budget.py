"""The context budget's pure parts: estimates, calibration, where to split, what to cut."""

from __future__ import annotations

import dataclasses
import random

import pytest

from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.context import (
    CUT_MARKER,
    Limits,
    chunks_for_summary,
    context_tokens,
    cut_tool_results,
    split_point,
    system_with_summary,
    transcript,
    without_summary,
)
from services.orchestrator.turn.tokens import Calibration, message_tokens, text_tokens
from services.scripted_model.chunks import count_tokens


def msg(role: str, content: str, **extra: object) -> StoredMessage:
    return StoredMessage(role, content, **extra)  # type: ignore[arg-type]


def turn(n: int, result: str = "x = 1\n" * 50) -> list[StoredMessage]:
    call = {"id": f"c{n}", "name": "read_file", "arguments": '{"path": "a.py"}'}
    return [
        msg("user", f"request {n}"),
        msg("assistant", "", tool_calls=[call]),
        msg("tool", result, name="read_file", tool_call_id=f"c{n}"),
        msg("assistant", f"answer {n}"),
    ]


def pairs_valid(history: list[StoredMessage]) -> bool:
    """Every tool result follows its call, every call has its result."""
    open_calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
        for call in message.tool_calls or ():
            open_calls.add(call["id"])
    return not open_calls


def test_the_estimate_never_counts_less_than_the_scripted_model() -> None:
    rng = random.Random(7)
    alphabet = "abcdefghijklmnop_ {}[]():;,.\"'\n0123456789ЖЁж中文カ"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        assert text_tokens(text) >= count_tokens(text)


def test_cjk_text_counts_a_token_a_character() -> None:
    """Han and kana are written without spaces: a run of them is not one word."""
    assert text_tokens("请修复请求处理函数") == 9
    assert text_tokens("カタカナ") == 4
    assert text_tokens("fix 中文 bug") == 4
    assert text_tokens("ab中文cd") == 4


def test_a_message_counts_its_calls_and_reasoning_apart() -> None:
    plain = message_tokens("hello there")
    call = [{"name": "read_file", "arguments": '{"path": "a.py"}'}]
    assert message_tokens("hello there", call) > plain
    assert msg("user", "hello there").token_count == plain
    assert msg("user", "hello there", tokens=99).token_count == 99
    thought = StoredMessage("assistant", "hello there", reasoning="because it is polite")
    reasoning = text_tokens("because it is polite")
    assert thought.token_count == plain and thought.reasoning_count == reasoning > 0
    assert thought.prompt_tokens() == plain
    assert thought.prompt_tokens(with_reasoning=True) == plain + reasoning
    stored = StoredMessage("assistant", "hi", reasoning="because", tokens=7, reasoning_tokens=40)
    assert context_tokens([stored]) == 7 and context_tokens([stored], True) == 47


def test_reasoning_sent_back_moves_the_split_earlier() -> None:
    history = [m for n in range(4) for m in turn(n)]
    history = [
        dataclasses.replace(m, reasoning="x " * 200) if m.role == "assistant" else m
        for m in history
    ]
    keep = context_tokens(history[-8:])
    assert split_point(history, keep) == len(history) - 8
    assert split_point(history, keep, with_reasoning=True) > len(history) - 8


def test_calibration_moves_towards_what_the_upstream_reports_and_is_bounded() -> None:
    calibration = Calibration()
    assert calibration.scale("m", 1000) == 1000
    calibration.observe("m", 1000, 1500)
    assert calibration.ratio("m") == 1.5
    calibration.observe("m", 1000, 1000)
    assert 1.0 < calibration.ratio("m") < 1.5
    calibration.observe("wild", 10, 10_000)
    assert calibration.ratio("wild") == 2.0
    calibration.observe("none", 0, 50)
    assert calibration.ratio("none") == 1.0 and calibration.ratio("other") == 1.0


def test_limits_keep_room_for_the_answer() -> None:
    limits = Limits(window=10_000, reserve=1_000)
    assert (limits.prompt, limits.threshold) == (9_000, 8_000)
    assert Limits(window=10_000, reserve=9_000).prompt == 5_000


def test_the_split_never_separates_a_call_from_its_result() -> None:
    history = [m for n in range(10) for m in turn(n)]
    for keep in range(0, context_tokens(history), 37):
        split = split_point(history, keep)
        assert split > 0
        assert history[split].role != "tool"
        assert pairs_valid(history[split:]) and pairs_valid(history[:split])


def test_the_split_prefers_a_user_message_and_keeps_the_last_turn() -> None:
    history = [m for n in range(5) for m in turn(n)]
    split = split_point(history, context_tokens(history[-8:]))
    assert history[split].role == "user" and split == len(history) - 8
    # Too little room for even the last turn: the latest place that is not a result.
    assert split_point(history, 0) == len(history) - 1
    assert split_point(history[:1], 1000) == 0


def test_a_summary_row_goes_into_the_system_prompt() -> None:
    summary = msg("summary", "- The user asked: request 0", tokens=10)
    history = [summary, *turn(1)]
    assert system_with_summary("Be brief.", history).endswith("request 0")
    assert system_with_summary("Be brief.", turn(1)) == "Be brief."
    assert without_summary(history) == turn(1)


def test_large_tool_results_are_cut_with_a_marker_and_pairs_stay() -> None:
    big = "line of a large file\n" * 2000
    history = [*turn(0, big), *turn(1)]
    before = context_tokens(history)
    cut, saved = cut_tool_results(history, before - 1000)
    assert saved > 0 and context_tokens(cut) == before - saved
    assert CUT_MARKER.split("{")[0] in cut[2].content
    assert cut[2].content.startswith("line of a large file")
    assert pairs_valid(cut) and [m.role for m in cut] == [m.role for m in history]
    untouched, nothing = cut_tool_results(turn(2), 0)
    assert nothing == 0 and untouched == turn(2)


def test_the_transcript_labels_roles_and_caps_each_message() -> None:
    history = [msg("summary", "- earlier"), *turn(0, "y" * 40_000)]
    text = transcript(history, cap_tokens=100)
    assert text.startswith("[earlier summary]\n- earlier")
    assert "[user] request 0" in text and "[tool result of read_file]" in text
    assert "(calls read_file with" in text and len(text) < 2_000


@pytest.mark.parametrize("budget", [50, 200, 10_000])
def test_summary_groups_fit_their_budget_and_keep_the_order(budget: int) -> None:
    history = [m for n in range(20) for m in turn(n)]
    groups = chunks_for_summary(history, budget, cap_tokens=40)
    assert [m for g in groups for m in g] == history
    for group in groups:
        costs = [min(m.token_count, 44) for m in group]
        assert len(group) == 1 or sum(costs) <= budget
