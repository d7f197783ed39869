"""Which model call failures before the first token are retried inside the turn."""

from __future__ import annotations

import grpc

from services.orchestrator.peers.llm import RESTART_ATTEMPTS, retry_delay

S = grpc.StatusCode


def test_an_unreachable_or_cut_upstream_is_retried_with_growing_back_off() -> None:
    delays = [retry_delay(S.UNAVAILABLE, "LLM_PROXY_UNAVAILABLE", n, 3) for n in range(4)]
    assert delays == [0.5, 1.0, 2.0, None]
    assert retry_delay(S.ABORTED, "LLM_STREAM_INTERRUPTED", 0, 3) == 0.5


def test_the_back_off_is_capped() -> None:
    assert retry_delay(S.UNAVAILABLE, "LLM_PROXY_UNAVAILABLE", 10, 20) == 4.0


def test_llmproxy_restarting_is_retried_on_its_own_budget() -> None:
    for status in (S.UNAVAILABLE, S.UNKNOWN, S.INTERNAL, S.CANCELLED):
        assert retry_delay(status, None, 0, 0) == 0.2
    assert retry_delay(S.UNAVAILABLE, None, RESTART_ATTEMPTS - 1, 0) is None


def test_timeouts_refusals_and_bad_requests_are_not_retried() -> None:
    assert retry_delay(S.DEADLINE_EXCEEDED, "LLM_TIMEOUT", 0, 3) is None
    assert retry_delay(S.DEADLINE_EXCEEDED, None, 0, 3) is None
    assert retry_delay(S.FAILED_PRECONDITION, "LLM_ERROR", 0, 3) is None
    assert retry_delay(S.INVALID_ARGUMENT, None, 0, 3) is None
    assert retry_delay(S.UNAVAILABLE, "LLM_PROXY_UNAVAILABLE", 0, 0) is None
