"""A session Runtime over real Postgres for unit tests: every collaborator is real but
the turn, the runtime's ``inputs`` parameter, which ``Turns`` plays: it records what it
handles and holds a turn until a test opens its gate."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

from codelab.v1 import common_pb2 as pb
from services.common.db import Pool
from services.common.limit_settings import LimitSettings
from services.orchestrator.agents.instances import InstancePool
from services.orchestrator.agents.templates import AgentRegistry, install_templates
from services.orchestrator.peers.mesh_clients import HitlClient
from services.orchestrator.session.client_ids import ClientIds
from services.orchestrator.session.inputs import Inputs
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.session.ownership import Ownership
from services.orchestrator.session.runtime import Runtime
from services.orchestrator.session.tool_timeouts import ToolTimeouts
from services.orchestrator.state import events
from services.orchestrator.state.hub import SessionHub
from services.orchestrator.state.store import SessionStore, StoredMessage, TurnContext, TurnStart
from services.orchestrator.turn.toolbox import ToolSpec

T = TypeVar("T")


class NoEarlyRequests:
    """Stands for the loop's LlmClient where the runtime asks it to send a turn's request
    early (peers/early.py): these turns call no model, so nothing is sent."""

    def send_early(self, *_: Any, **__: Any) -> None:
        return None

    def drop_early(self, session_id: str, owner: object = None) -> None:
        return None

    def has_early(self, session_id: str) -> bool:
        return False


class Turns:
    """Stands for Inputs: records what it handles and answers each message with its
    events; a user message whose text is in ``gates`` runs until its gate opens."""

    def __init__(self, hub: SessionHub) -> None:
        self.hub = hub
        self.loop = self  # the runtime reads the loop's begin/end/take_last_done through it
        self.llm = NoEarlyRequests()
        self.plans = self
        self.handled: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.last_done: dict[str, str] = {}
        self.status = "completed"
        self.turns_over: list[str] = []
        self.contexts: list[TurnContext | None] = []
        """What each handled message's start read for a model call (user messages only)."""
        self.starts: dict[str, TurnStart] = {}

    @staticmethod
    def background(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        return asyncio.create_task(work)

    @staticmethod
    def ahead(message: pb.UserMessage) -> None:
        return None  # these turns switch to no agent

    def begin(self, sid: str, start: TurnStart) -> None:
        self.contexts.append(start.context)
        self.starts[sid] = start

    def start_of(self, sid: str) -> TurnStart | None:
        return self.starts.get(sid)

    def end(self, sid: str) -> tuple[int, int]:
        return (0, 0)  # no model calls here, so no tool token counts

    def take_last_done(self, sid: str) -> str:
        return self.last_done.pop(sid, "")

    def turn_over(self, sid: str) -> None:
        self.turns_over.append(sid)

    async def done(self, sid: str, status: str, *before: pb.ServerEvent) -> None:
        for event in before:
            await self.hub.emit(sid, event)
        self.last_done[sid] = status
        await self.hub.emit(sid, events.done(status))

    async def user_message(
        self, sid: str, message: pb.UserMessage, applies: tuple[str, int] | None = None
    ) -> None:
        self.handled.append((sid, message.content))
        start = self.starts.get(sid)
        if not (start and start.stored):
            if message.content == "lost" and self.handled.count((sid, "lost")) == 1:
                raise RuntimeError("failed before the message was stored")
            # As Inputs does when the turn's start did not store it (something was open):
            # stored at once, its claim marked started in the same commit.
            user = StoredMessage("user", message.content)
            await self.hub.store.add_message(sid, user, flush=False, applies=applies)
        if message.content == "boom":
            raise RuntimeError("a bug")
        gate = self.gates.get(message.content)
        if gate is not None:
            await gate.wait()
        await self.done(sid, self.status, events.assistant_content(message.content, "c", "m"))

    async def cancelled(self, sid: str) -> None:
        self.handled.append((sid, "cancelled"))
        await self.done(sid, "cancelled")

    async def fail(self, sid: str, code: str, message: str, call_id: str | None = None) -> None:
        self.handled.append((sid, code))
        await self.done(sid, "error", events.error(code, message))


@contextlib.asynccontextmanager
async def running_runtime(pool: Pool) -> AsyncIterator[Runtime]:
    """A Runtime over ``pool`` whose turns are played by ``Turns``; sessions s1 and s2."""
    agents = AgentRegistry(await install_templates(pool), multi_agent_mode=True)
    store = SessionStore(pool)
    hub = SessionHub(store)
    instances = InstancePool(pool, agents)

    async def catalog() -> dict[str, ToolSpec]:
        return {}

    runtime = Runtime(
        store,
        hub,
        cast(Inputs, Turns(hub)),
        agents,
        cast(HitlClient, None),  # asked only by the expiry sweep, which is not started
        Ownership(pool),
        instances,
        UserLimits(pool, LimitSettings()),
        ClientIds(pool),
        ToolTimeouts(pool, catalog),
    )
    for sid in ("s1", "s2"):
        await runtime.attach(sid, "u1")
    try:
        yield runtime
    finally:
        await runtime.close()
        await instances.close()
        await hub.close()


def turns(runtime: Runtime) -> Turns:
    return cast(Turns, runtime.inputs)


def said(content: str, cid: str | None = None) -> pb.ClientMessage:
    message = pb.ClientMessage(user_message=pb.UserMessage(content=content, role="user"))
    if cid is not None:
        message.client_message_id = cid
    return message


CANCEL = pb.ClientMessage(cancel=pb.Cancel())


def gate(runtime: Runtime, content: str) -> asyncio.Event:
    opened = turns(runtime).gates[content] = asyncio.Event()
    return opened


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 5) -> None:
    async with asyncio.timeout(seconds):
        while True:
            if await check():
                return
            await asyncio.sleep(0.01)


async def started(runtime: Runtime) -> None:
    """Wait until the first message is being handled."""

    async def handling() -> bool:
        return bool(turns(runtime).handled)

    await until(handling)


async def logged(runtime: Runtime, sid: str) -> list[tuple[str, str]]:
    """(type, text) of the session's committed events: the content, error code or status."""
    out: list[tuple[str, str]] = []
    for _, raw in await runtime.store.events_after(sid, 0, 1000):
        event = pb.ServerEvent.FromString(raw)
        kind = event.WhichOneof("event") or ""
        if kind == "assistant_message":
            out.append((kind, event.assistant_message.content))
        elif kind == "error":
            out.append((kind, pb.ErrorCode.Name(event.error.error_code)))
        else:
            out.append((kind, event.done.status))
    return out


async def until_logged(runtime: Runtime, sid: str, wanted: tuple[str, str]) -> None:
    async def seen() -> bool:
        return wanted in await logged(runtime, sid)

    await until(seen)


async def dones(runtime: Runtime, sid: str, count: int) -> list[tuple[str, str]]:
    """The session's log once it holds ``count`` done events."""

    async def enough() -> bool:
        return sum(k == "done" for k, _ in await logged(runtime, sid)) >= count

    await until(enough)
    return await logged(runtime, sid)
