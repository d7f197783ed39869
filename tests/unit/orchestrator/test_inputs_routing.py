"""Which agent takes a new user message: the mode, the user's choice, the current agent,
or the model's classification with the keyword (and agent directory) fallback. A real
AgentLoop over Postgres, with a scripted llmproxy on a free port."""

from __future__ import annotations

import json

import pytest

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool
from services.llmproxy.errors import LlmError
from services.orchestrator.session import inputs as inputs_module
from tests.support.llm_proxy import Reply
from tests.support.routing import Routing, routing_over, said


async def test_single_agent_mode_routes_to_universal_without_asking(pool: Pool) -> None:
    async with routing_over(pool, multi_agent_mode=False) as single:
        route = await single.inputs.route("s1", said("fix the crash"))
        assert route == ("universal", "single-agent mode", None, "mode")
        assert single.proxy.requests == []


async def test_the_users_choice_wins_without_asking(routing: Routing) -> None:
    route = await routing.inputs.route("s1", said("fix the crash", agent_type="ask"))
    assert route == ("ask", "requested by the user", None, "explicit")
    assert routing.proxy.requests == []


async def test_a_new_task_is_classified_by_the_model(routing: Routing) -> None:
    routing.model_says('{"agent": "debug", "confidence": "high", "reason": "a crash"}')
    assert await routing.inputs.route("s1", said("the parser crashes")) == (
        "debug",
        "a crash",
        "high",
        "llm",
    )
    [request] = routing.proxy.requests
    assert (request.purpose, request.max_tokens) == ("classification", 200)
    assert request.temperature == pytest.approx(0.3)
    assert "User request: the parser crashes" in request.messages[0].content
    assert await routing.fallback_errors("s1") == []


@pytest.mark.parametrize(("current", "asked"), [("coder", False), ("retired", True)])
async def test_a_served_current_agent_keeps_the_task(
    routing: Routing, pool: Pool, current: str, asked: bool
) -> None:
    await pool.execute(
        "update orchestrator.sessions set current_agent = $2 where session_id = $1", "s1", current
    )
    routing.model_says('{"agent": "ask", "confidence": "low", "reason": "a question"}')
    agent, reason, _, method = await routing.inputs.route("s1", said("and now the tests"))
    if asked:  # an agent no longer served: classified like a new task
        assert (agent, reason, method) == ("ask", "a question", "llm")
    else:
        assert (agent, reason, method) == ("coder", "", "")
    assert len(routing.proxy.requests) == int(asked)


async def test_an_answer_naming_no_agent_falls_back_to_keywords_and_says_so(
    routing: Routing,
) -> None:
    routing.model_says("I would rather not say.")
    choice = await routing.inputs.classify("s1", "the parser crashes with an error")
    assert (choice.agent, choice.method) == ("debug", "keywords")
    [error] = await routing.fallback_errors("s1")
    assert pb.ErrorCode.Name(error.error_code) == "CLASSIFICATION_FAILED"
    assert "named no agent" in error.content
    assert json.loads(error.details_json) == {"fallback": "keywords"}


async def test_a_failing_model_falls_back_to_keywords(routing: Routing) -> None:
    routing.proxy.play(Reply((), LlmError("upstream said 500")))
    choice = await routing.inputs.classify("s1", "write a function that sorts")
    assert (choice.agent, choice.method) == ("coder", "keywords")
    [error] = await routing.fallback_errors("s1")
    assert "upstream said 500" in error.content
    assert len(routing.proxy.requests) == 1  # a classification is not retried


async def test_a_slow_model_falls_back_to_keywords(
    routing: Routing, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs_module, "CLASSIFY_SECONDS", 0.3)
    routing.proxy.play(Reply((), hold=5))
    choice = await routing.inputs.classify("s1", "explain what a monad is")
    assert (choice.agent, choice.method) == ("ask", "keywords")
    [error] = await routing.fallback_errors("s1")
    assert "TimeoutError" in error.content


async def test_the_model_may_pick_an_admins_agent_the_directory_found(routing: Routing) -> None:
    routing.model_says('{"agent": "translator", "confidence": "high", "reason": "i18n"}')
    choice = await routing.inputs.classify("s1", "German translation of the Save button")
    assert (choice.agent, choice.method) == ("translator", "llm")
    prompt = routing.proxy.requests[0].messages[0].content
    assert "- translator: Translates user interface strings" in prompt
    assert "- conductor:" not in prompt  # ranked for this request only when it matches


async def test_an_agent_the_directory_did_not_rank_is_not_accepted(routing: Routing) -> None:
    routing.model_says('{"agent": "conductor", "confidence": "high", "reason": "big"}')
    choice = await routing.inputs.classify("s1", "rename the sort helper")
    assert (choice.agent, choice.method) == ("coder", "keywords")


async def test_without_keywords_the_directory_decides_the_fallback(routing: Routing) -> None:
    routing.proxy.play(Reply((), LlmError("down")))
    choice = await routing.inputs.classify("s1", "German for the Save button")
    assert (choice.agent, choice.confidence, choice.method) == ("translator", "medium", "directory")
    assert choice.reason.startswith("agent directory: ") and "german" in choice.reason


async def test_keywords_outrank_the_directory_when_they_are_sure(routing: Routing) -> None:
    routing.proxy.play(Reply((), LlmError("down")))
    choice = await routing.inputs.classify("s1", "the German translation crashes with an error")
    assert (choice.agent, choice.method) == ("debug", "keywords")
    assert choice.confidence != "low"
