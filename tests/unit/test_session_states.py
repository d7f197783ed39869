"""The session state machine of seed 003 as data: which moves are allowed, and why not."""

from __future__ import annotations

import pytest

from services.orchestrator.errors import InvalidTransition
from services.orchestrator.state.session_states import (
    TERMINAL,
    TRANSITIONS,
    SessionState,
    can_move,
    check_transition,
    parse_state,
    sources_of,
)

S = SessionState


def test_every_state_has_its_transitions() -> None:
    assert set(TRANSITIONS) == set(SessionState)
    assert {s.value for s in SessionState} == {
        "INITED", "RESEARCHING", "WAITING_FOR_CLARIFICATION", "COMPLETED", "FAILED", "CANCELLED",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.INITED, S.RESEARCHING),  # start()
        (S.RESEARCHING, S.WAITING_FOR_CLARIFICATION),  # ClarificationTool
        (S.WAITING_FOR_CLARIFICATION, S.RESEARCHING),  # provide_clarification()
        (S.RESEARCHING, S.COMPLETED),  # FinalAnswer(completed)
        (S.RESEARCHING, S.FAILED),  # FinalAnswer(failed) / error
        (S.RESEARCHING, S.CANCELLED),
        (S.WAITING_FOR_CLARIFICATION, S.CANCELLED),
        (S.COMPLETED, S.RESEARCHING),  # the next task of the same chat
        (S.RESEARCHING, S.RESEARCHING),  # replayed after a crash: a no-op
    ],
)
def test_the_seed_moves_are_allowed(current: SessionState, target: SessionState) -> None:
    assert can_move(current, target)
    check_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.INITED, S.COMPLETED),
        (S.INITED, S.WAITING_FOR_CLARIFICATION),
        (S.WAITING_FOR_CLARIFICATION, S.COMPLETED),
        (S.COMPLETED, S.FAILED),
        (S.CANCELLED, S.WAITING_FOR_CLARIFICATION),
        (S.FAILED, S.INITED),
    ],
)
def test_other_moves_are_refused_with_a_clear_message(
    current: SessionState, target: SessionState
) -> None:
    assert not can_move(current, target)
    with pytest.raises(InvalidTransition) as refused:
        check_transition(current, target)
    assert f"from {current} to {target}" in refused.value.message
    assert refused.value.code == "INVALID_MESSAGE_TYPE"


def test_nothing_returns_to_inited_and_terminal_states_only_reopen() -> None:
    assert sources_of(S.INITED) == {S.INITED}
    for state in TERMINAL:
        assert TRANSITIONS[state] == {S.RESEARCHING}
    assert sources_of(S.COMPLETED) == {S.COMPLETED, S.RESEARCHING}


def test_state_names_are_parsed_case_insensitively() -> None:
    assert parse_state(" researching ") is S.RESEARCHING
    with pytest.raises(InvalidTransition, match="unknown session state"):
        parse_state("DONE")
