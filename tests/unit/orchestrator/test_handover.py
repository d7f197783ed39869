"""When an answered turn's request is a guess for the next message naming its agent: the
system prompt carries the hand-over (who had the session, and why), so only when the next
turn will be handed the session the same way."""

from __future__ import annotations

from services.orchestrator.turn.handover import NAMED, Handover, handed_again

ROUTED = Handover("orchestrator", "code to write")
NAMED_TURN = Handover("orchestrator", NAMED)


def test_a_named_agents_next_named_turn_is_handed_the_session_the_same_way() -> None:
    assert handed_again(NAMED_TURN, "coder", multi_agent=True)


def test_a_routed_turn_is_not_how_the_next_named_one_is_handed_the_session() -> None:
    assert not handed_again(ROUTED, "coder", multi_agent=True)
    assert not handed_again(Handover(), "coder", multi_agent=True)


def test_nothing_switches_for_the_orchestrator_or_in_single_agent_mode() -> None:
    assert handed_again(ROUTED, "orchestrator", multi_agent=True)
    assert handed_again(ROUTED, "coder", multi_agent=False)
    assert handed_again(Handover(), "universal", multi_agent=False)
