"""The agent loop routing calls to executors: validation, the approval gate, the port;
and a whole answer committed before its row is written (a cancel or a failed write in
between keeps it).

The loop is real over a real Postgres (store, ledger, hub) and a real hitl service on a
free port; the model is the only party replaced (a scripted stream of outputs), and the
executors under test are small recording ones registered through ``AgentLoop.register``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from codelab.v1 import common_pb2 as pb
from codelab.v1 import hitl_pb2_grpc
from services.common.channels import mesh_channel
from services.common.db import Pool
from services.common.errors import DatabaseError
from services.common.model_stream import ModelFinished, ModelOutput, ModelToolCall
from services.common.model_stream import TextPiece as Text
from services.hitl import server as hitl_server
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate, install_templates
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import RowChanges, SessionStore, StoredMessage
from services.orchestrator.turn import model_step
from services.orchestrator.turn.ledger import Ledger, LedgerCall
from services.orchestrator.turn.loop import AgentLoop
from services.orchestrator.turn.port import TurnPort
from services.orchestrator.turn.toolbox import Toolbox, ToolSpec
from tests.support.mesh import base_settings

SID = "loop-session"
END = ModelFinished("stop", 10, 5)


class ScriptedStream:
    """The model: each call streams the next scripted reply and records its prompt."""

    def __init__(self, *replies: Sequence[ModelOutput]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[StoredMessage]] = []

    async def complete(
        self, session_id: str, messages: Sequence[StoredMessage], **_: Any
    ) -> AsyncIterator[ModelOutput]:
        self.prompts.append(list(messages))
        for output in self.replies.pop(0):
            yield output

    early = False
    """No request is guessed ahead here (peers/early.py)."""

    def has_early(self, session_id: str) -> bool:
        return False  # nothing is sent before a turn asks


@dataclass
class Recorder:
    """An executor that records its calls and completes them through the port."""

    port: TurnPort
    gated: bool = False
    waits: bool = False
    runs: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)

    async def run(
        self, call: LedgerCall, template: AgentTemplate, arguments: dict[str, Any]
    ) -> bool:
        self.runs.append((call.tool_name, arguments, call.reason))
        if not self.waits:
            await self.port.complete(call, f"ran {call.tool_name}")
        return self.waits


CATALOG = [
    ToolSpec(
        "lookup",
        "Look a word up",
        {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
            "additionalProperties": False,
        },
        "recorder",
    ),
    ToolSpec("write_file", "Write a file", {"type": "object"}, "gated"),
    ToolSpec("orphan", "A tool nobody runs", {"type": "object"}, "nobody"),
]


@contextlib.asynccontextmanager
async def hitl_client(pool: Pool) -> AsyncIterator[HitlClient]:
    settings = base_settings("http://127.0.0.1:9")
    server, port = await hitl_server.build(settings, pool, "127.0.0.1:0")
    await server.start()
    channel = mesh_channel(settings, f"127.0.0.1:{port}")
    try:
        yield HitlClient(cast("hitl_pb2_grpc.HitlAsyncStub", hitl_pb2_grpc.HitlStub(channel)))
    finally:
        await channel.close()
        await server.stop(0)


@dataclass
class Rig:
    loop: AgentLoop
    model: ScriptedStream
    recorder: Recorder
    gated: Recorder

    async def events(self) -> list[pb.ServerEvent]:
        await self.loop.hub.flush()
        rows = await self.loop.store.events_after(SID, 0)
        return [pb.ServerEvent.FromString(raw) for _, raw in rows]

    async def kinds(self) -> list[str]:
        return [e.WhichOneof("event") or "" for e in await self.events()]


@pytest.fixture
async def rig(pool: Pool) -> AsyncIterator[Rig]:
    store = SessionStore(pool)
    await store.ensure_session(SID, "user-1", agent="universal")
    await store.add_message(SID, StoredMessage("user", "look up 'loop'"))
    agents = AgentRegistry(await install_templates(pool), multi_agent_mode=False)

    async def catalog() -> list[ToolSpec]:
        return CATALOG

    model = ScriptedStream()
    async with hitl_client(pool) as hitl:
        hub = SessionHub(store)
        loop = AgentLoop(
            store,
            Ledger(pool),
            hub,
            cast(LlmClient, model),
            agents,
            Toolbox(catalog, agents.all),
            hitl,
        )
        recorder, gated = Recorder(loop), Recorder(loop, gated=True, waits=True)
        loop.register("recorder", recorder)
        loop.register("gated", gated)
        yield Rig(loop, model, recorder, gated)
        await hub.close()


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "m1") -> ModelToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ModelToolCall(call_id, name, raw)


async def test_a_call_runs_on_its_executor_and_the_model_reads_the_result(rig: Rig) -> None:
    rig.model.replies = [[call("lookup", {"word": "loop"}), END], [Text("Found it."), END]]
    await rig.loop.advance(SID)
    assert rig.recorder.runs == [("lookup", {"word": "loop"}, None)]
    tool_message = rig.model.prompts[1][-1]
    assert (tool_message.role, tool_message.content) == ("tool", "ran lookup")
    kinds = await rig.kinds()
    assert kinds[-1] == "done" and "assistant_message" in kinds
    assert (await rig.events())[-1].done.status == "completed"


async def test_arguments_that_break_the_schema_never_reach_the_executor(rig: Rig) -> None:
    rig.model.replies = [[call("lookup", {"word": 3}), END], [Text("Sorry."), END]]
    await rig.loop.advance(SID)
    assert rig.recorder.runs == []
    told = rig.model.prompts[1][-1]
    assert told.role == "tool" and told.content.startswith("Error:")


async def test_a_tool_without_an_executor_is_refused_with_the_seed_code(rig: Rig) -> None:
    rig.model.replies = [[call("orphan", {}), END], [Text("OK."), END]]
    await rig.loop.advance(SID)
    errors = [e.error for e in await rig.events() if e.WhichOneof("event") == "error"]
    assert [pb.ErrorCode.Name(e.error_code) for e in errors] == ["TOOL_VALIDATION_ERROR"]
    assert rig.model.prompts[1][-1].content.startswith("Error: Tool orphan is not allowed")


async def test_a_gated_call_that_needs_a_human_waits_then_runs_once_approved(rig: Rig) -> None:
    arguments = {"path": "app.py", "content": "print(1)\n"}
    rig.model.replies = [[call("write_file", arguments), END]]
    await rig.loop.advance(SID)
    assert rig.gated.runs == []  # hitl's policy asks a human before a write
    assert (await rig.events())[-1].done.status == "awaiting_approval"
    [waiting] = await rig.loop.ledger.open_calls(SID)
    assert waiting.state == "awaiting_approval"
    approved = await rig.loop.ledger.get(SID, waiting.call_id)
    assert approved is not None
    assert await rig.loop.run_approved(approved) is True
    assert [(name, reason) for name, _, reason in rig.gated.runs] == [
        ("write_file", approved.reason)
    ]


async def test_a_finished_answer_is_the_task_end(rig: Rig) -> None:
    rig.model.replies = [[Text("Just an answer."), END]]
    await rig.loop.advance(SID)
    history = await rig.loop.store.history(SID)
    assert (history[-1].role, history[-1].content) == ("assistant", "Just an answer.")
    assert (await rig.events())[-1].done.status == "completed"


async def test_nothing_of_a_finished_turn_stays_in_the_loop(rig: Rig) -> None:
    """A long-lived orchestrator handles sessions without end: a message's end forgets its
    rows and parents, a turn's end its budget (kept across the messages of a turn)."""
    loop = rig.loop
    loop.new_turn(SID)
    rig.model.replies = [[Text("Just an answer."), END]]
    await loop.advance(SID)
    assert SID in loop._parents and SID in loop._budgets  # read and counted while handled
    loop.end(SID)
    assert SID not in loop._parents and SID not in loop._rows
    assert loop._budgets[SID].iterations == 1  # the turn may go on with a tool result
    loop.turn_over(SID)
    assert SID not in loop._budgets


async def test_an_answers_end_shares_the_commit_of_its_done(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final ``assistant_message`` waits for the ``done`` after it (one commit, one
    WAL flush); the answer's row is written without a flush of its own (that commit
    flushes it). The wait is widened: what is checked is that the answer waits for its
    ``done``, not that a busy box reaches it within the 5 ms a service allows."""
    monkeypatch.setattr(model_step, "FOLLOWED_WAIT", 30.0)
    store = rig.loop.store
    commits: list[list[pb.ServerEvent]] = []
    flushes: list[tuple[str, bool]] = []
    append, add = store.append_events, store.add_message

    async def counting(*columns: Any, **options: Any) -> None:
        commits.append([pb.ServerEvent.FromString(raw) for raw in columns[3]])
        await append(*columns, **options)

    async def adding(sid: str, message: StoredMessage, **options: Any) -> None:
        flushes.append((message.role, options.get("flush", True)))
        await add(sid, message, **options)

    async def answering(*_: Any, **__: Any) -> AsyncIterator[ModelOutput]:
        yield Text("Just an answer.")
        await asyncio.sleep(0.1)  # its token is committed before the answer ends
        yield END

    monkeypatch.setattr(store, "append_events", counting)
    monkeypatch.setattr(store, "add_message", adding)
    monkeypatch.setattr(rig.model, "complete", answering)
    async with asyncio.timeout(10):  # not the widened wait: the done comes at once
        await rig.loop.advance(SID)
    assert [len(c) for c in commits] == [1, 2]
    last = commits[-1]
    assert [e.WhichOneof("event") for e in last] == ["assistant_message", "done"]
    assert last[0].assistant_message.is_final
    assert flushes == [("assistant", False)]
    assert (await store.history(SID))[-1].content == "Just an answer."


async def test_an_answer_that_came_whole_is_committed_before_its_row_is_written(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its client waits for that commit; the row's statement comes after it."""
    store = rig.loop.store
    order: list[str] = []
    append, add = store.append_events, store.add_message

    async def committing(*columns: Any, **options: Any) -> None:
        await append(*columns, **options)
        order.append("committed")

    async def adding(sid: str, message: StoredMessage, **options: Any) -> None:
        order.append(f"{message.role} row")
        await add(sid, message, **options)

    monkeypatch.setattr(store, "append_events", committing)
    monkeypatch.setattr(store, "add_message", adding)
    rig.model.replies = [[Text("All "), Text("at once."), END]]
    await rig.loop.advance(SID)
    assert order[:2] == ["committed", "assistant row"]
    assert (await store.history(SID))[-1].content == "All at once."


async def test_a_turn_cancelled_while_its_answer_commits_keeps_the_answer(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = rig.loop.store
    append = store.append_events
    committing, gate = asyncio.Event(), asyncio.Event()

    async def held(*columns: Any, **options: Any) -> None:
        committing.set()
        await gate.wait()
        await append(*columns, **options)

    monkeypatch.setattr(store, "append_events", held)
    rig.model.replies = [[Text("Said and seen."), END]]
    turn = asyncio.create_task(rig.loop.advance(SID))
    await asyncio.wait_for(committing.wait(), 5)  # the answer is whole, its commit held
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    gate.set()
    assert (await store.history(SID))[-1].content == "Said and seen."


async def test_a_turn_whose_count_write_fails_after_its_answer_keeps_the_answer(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = rig.loop.store
    write = store.write_changes

    async def refusing_counts(sid: str, changes: RowChanges, **options: Any) -> None:
        if changes.tool_tokens is not None:  # the call's tool token counts, after its answer
            raise DatabaseError("Postgres went away")
        await write(sid, changes, **options)

    monkeypatch.setattr(store, "write_changes", refusing_counts)
    rig.model.replies = [[Text("Said before the failure."), END]]
    await rig.loop.advance(SID)
    errors = [e.error for e in await rig.events() if e.WhichOneof("event") == "error"]
    assert [pb.ErrorCode.Name(e.error_code) for e in errors] == ["DB_CONNECTION_ERROR"]
    assert (await store.history(SID))[-1].content == "Said before the failure."
