"""/v1 answers a session that vanished after ``resolve`` as ``resolve`` would answer now."""

from __future__ import annotations

from collections.abc import AsyncIterator

from services.gateway.errors import OpenAIError
from services.gateway.openai_api import as_resolved, resolved, unknown_model
from services.gateway.openai_render import Output

GONE = unknown_model("oai-1")


def test_the_orchestrators_session_not_found_is_answered_as_an_unknown_model() -> None:
    vanished = OpenAIError(404, "Session not found: oai-1", "SESSION_NOT_FOUND")
    answer = as_resolved(vanished, GONE)
    assert answer.status == 404 and answer.code == "AGENT_NOT_FOUND"
    assert answer.body()["error"]["param"] == "model"


def test_other_failures_and_requests_without_an_answer_stay_as_they_are() -> None:
    unavailable = OpenAIError.of_code("LLM_PROXY_UNAVAILABLE", "down")
    assert as_resolved(unavailable, GONE) is unavailable
    vanished = OpenAIError(404, "Session not found: x", "SESSION_NOT_FOUND")
    assert as_resolved(vanished, None) is vanished  # a header's session: its own code


async def test_outputs_pass_through_but_for_a_vanished_session() -> None:
    vanished = OpenAIError(404, "Session not found: oai-1", "SESSION_NOT_FOUND")

    async def outputs() -> AsyncIterator[Output]:
        yield "Hello"
        yield vanished

    seen = [out async for out in resolved(outputs(), GONE)]
    assert seen == ["Hello", GONE]
