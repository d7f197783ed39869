"""A user message's own writes: the message at once, the agent switch once the first model
request is on its way; however the turn goes, they are written, and before its answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool
from services.common.errors import ServiceError
from services.llmproxy.errors import LlmError
from services.orchestrator.session.inputs import history_entry
from services.orchestrator.state.store import AgentAhead, RowChanges, SessionStore, TurnStart
from services.orchestrator.turn.toolbox import ToolSpec
from tests.support.llm_proxy import Reply, finish, text
from tests.support.routing import Routing, routing_over, said
from tests.support.runtime import until


async def start_turn(routing: Routing, sid: str) -> None:
    """What the runtime does before handing a user message over: the turn's start, which
    reads the history and hand-over context too."""
    start = await routing.store.begin_turn(sid, None, [], read_context=True)
    assert isinstance(start, TurnStart)
    routing.inputs.loop.begin(sid, start)


async def logged(routing: Routing, sid: str) -> list[str]:
    await routing.hub.flush()
    events = [pb.ServerEvent.FromString(raw) for _, raw in await routing.store.events_after(sid, 0)]
    return [e.WhichOneof("event") or "" for e in events]


async def roles(store: SessionStore, sid: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in await store.history(sid)]


async def test_the_switch_and_the_message_come_before_the_answer(routing: Routing) -> None:
    routing.proxy.play(Reply([text("Done."), finish()]))
    await start_turn(routing, "s1")
    await routing.inputs.user_message("s1", said("fix it", agent_type="coder"))
    kinds = await logged(routing, "s1")
    assert kinds.index("agent_switched") < kinds.index("assistant_message")
    assert await roles(routing.store, "s1") == [("user", "fix it"), ("assistant", "Done.")]


async def test_the_first_calls_switch_pin_and_counts_land_on_the_row_together(
    routing: Routing,
) -> None:
    routing.proxy.play(Reply([text("Done."), finish()]))
    await start_turn(routing, "s1")
    await routing.inputs.user_message("s1", said("fix it", agent_type="coder"))
    session = await routing.store.get_session("s1")
    coder = routing.inputs.loop.agents.get("coder")
    # To the coder (the turn's write), back when it answered (a switch of its own).
    assert session.switch_count == 2 and session.agent_versions == {"coder": coder.version}
    recorded = await routing.store.pool.fetch(
        "select to_agent, method from orchestrator.agent_switches where session_id = 's1'"
        " order by id"
    )
    assert [tuple(r.values()) for r in recorded] == [
        ("coder", "explicit"),
        ("orchestrator", "completion"),
    ]
    offered = session.tool_tokens_offered
    assert 0 < offered <= session.tool_tokens_all
    # The next turn's first call counts its tools on top; the pin stands.
    routing.proxy.play(Reply([text("Again."), finish()]))
    await start_turn(routing, "s1")
    await routing.inputs.user_message("s1", said("and again", agent_type="coder"))
    again = await routing.store.get_session("s1")
    assert again.agent_versions == {"coder": coder.version}
    assert again.tool_tokens_offered == 2 * offered and again.switch_count == 4


async def test_a_switch_the_turns_start_made_is_announced_not_written_again(
    routing: Routing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message naming its agent is switched to it by its turn's first statement (as the
    runtime starts a turn); the turn announces the switch, writes no row before its answer,
    and asks the model exactly as a turn that wrote the switch itself ("s2")."""
    writes: list[RowChanges] = []
    write = routing.store.write_changes

    async def recording(sid: str, changes: RowChanges, **options: Any) -> None:
        if changes:
            writes.append(changes)
        await write(sid, changes, **options)

    monkeypatch.setattr(routing.store, "write_changes", recording)
    message = said("fix it", agent_type="coder")
    ahead = routing.inputs.ahead(message)
    start = await routing.store.begin_turn(
        "s1", None, [], read_context=True, user=history_entry(message), ahead=ahead
    )
    assert isinstance(start, TurnStart) and start.switched is not None
    routing.inputs.loop.begin("s1", start)
    routing.proxy.play(Reply([text("Done."), finish()]))
    await routing.inputs.user_message("s1", message)
    assert await logged(routing, "s1") == [
        "agent_switched", "assistant_message", "assistant_message", "agent_switched", "done"
    ]  # fmt: skip
    assert writes == [RowChanges(switch=writes[0].switch)]  # only the switch back
    assert writes[0].switch is not None and writes[0].switch.to_agent == "orchestrator"
    session = await routing.store.get_session("s1")
    coder = routing.inputs.loop.agents.get("coder")
    assert session.switch_count == 2 and session.agent_versions == {"coder": coder.version}
    routing.proxy.play(Reply([text("Done."), finish()]))
    await start_turn(routing, "s2")
    await routing.inputs.user_message("s2", said("fix it", agent_type="coder"))
    first, second = routing.proxy.requests[-2:]
    assert first.messages == second.messages and first.tools == second.tools


def test_only_an_agent_served_here_is_switched_to_ahead(routing: Routing) -> None:
    inputs = routing.inputs
    coder = inputs.loop.agents.get("coder")
    assert inputs.ahead(said("fix it", agent_type="coder")) == AgentAhead(
        "coder", coder.version, "requested by the user", None, "explicit"
    )
    assert inputs.ahead(said("fix it", agent_type="nobody")) is None  # refused at routing
    assert inputs.ahead(said("fix it")) is None  # routed by the session's agent or a model


async def test_a_model_failing_before_any_token_leaves_the_message_and_switch(
    routing: Routing,
) -> None:
    routing.proxy.play(Reply((), LlmError("refused")))
    await start_turn(routing, "s1")
    await routing.inputs.user_message("s1", said("fix it", agent_type="coder"))
    assert await logged(routing, "s1") == ["agent_switched", "error", "done"]
    assert await roles(routing.store, "s1") == [("user", "fix it")]
    assert (await routing.store.get_session("s1")).current_agent == "coder"


async def test_a_model_failure_is_reported_after_a_slow_switch(routing: Routing) -> None:
    # The switch's write waits on the session row (held elsewhere); the model fails at once.
    routing.proxy.play(Reply((), LlmError("refused")))
    await start_turn(routing, "s1")
    async with routing.store.pool.acquire() as other, other.transaction():
        await other.execute(
            "select 1 from orchestrator.sessions where session_id = 's1' for update"
        )
        turn = asyncio.create_task(
            routing.inputs.user_message("s1", said("fix it", agent_type="coder"))
        )
        await asyncio.sleep(0.3)
        assert not turn.done()  # the error waits for the switch it follows
    await asyncio.wait_for(turn, 10)
    assert await logged(routing, "s1") == ["agent_switched", "error", "done"]


async def test_an_unknown_agent_type_still_keeps_the_message(routing: Routing) -> None:
    await start_turn(routing, "s1")
    with pytest.raises(ServiceError) as refused:
        await routing.inputs.user_message("s1", said("fix it", agent_type="nobody"))
    assert refused.value.code == "AGENT_NOT_FOUND"

    async def kept() -> bool:  # written beside the refusal, as the turn's writes are
        return await roles(routing.store, "s1") == [("user", "fix it")]

    await until(kept)
    assert routing.proxy.requests == []


async def test_the_message_is_stored_before_the_model_is_asked(pool: Pool) -> None:
    """A message's id is claimed before its turn starts: were its process to die while the
    catalog is away (toolsearch restarting), a resend would be answered ``duplicate``, so
    the message must already be stored."""
    away = asyncio.Event()

    async def catalog_away() -> list[ToolSpec]:
        await away.wait()
        return []

    async with routing_over(pool, catalog=catalog_away) as routing:
        await start_turn(routing, "s1")
        turn = asyncio.create_task(
            routing.inputs.user_message("s1", said("fix it", agent_type="coder"))
        )

        async def stored() -> bool:
            return await roles(routing.store, "s1") == [("user", "fix it")]

        await until(stored)
        assert routing.proxy.requests == [] and not turn.done()
        turn.cancel()
        await asyncio.wait([turn])
