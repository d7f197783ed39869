"""The agent instance pool, template versions and session states against real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.common.db import Pool, create_pool
from services.orchestrator.agents.instances import InstancePool, InstanceState
from services.orchestrator.agents.template_store import (
    InstanceRow,
    TemplateStore,
    recorded_instances,
)
from services.orchestrator.agents.templates import (
    AgentRegistry,
    builtin_definitions,
    install_templates,
)
from services.orchestrator.errors import InvalidTransition, PoolExhausted
from services.orchestrator.state.session_states import (
    SessionState,
    get_state,
    set_state,
)
from services.orchestrator.state.store import SessionStore

SHARED = {"llm": object(), "hitl": object()}


@pytest.fixture
async def registry(pool: Pool) -> AgentRegistry:
    return AgentRegistry(await install_templates(pool), multi_agent_mode=True)


@pytest.fixture
async def instances(pool: Pool, registry: AgentRegistry) -> AsyncIterator[InstancePool]:
    agents = InstancePool(pool, registry, 1, 2, clients=SHARED, lease_timeout=5)
    await agents.start()
    yield agents
    await agents.close()


async def rows(agents: InstancePool, template: str = "") -> list[InstanceRow]:
    """The rows once every change so far is written (they are written behind memory)."""
    await agents.settled()
    return await recorded_instances(agents.pool, template)


async def states(agents: InstancePool, template: str) -> dict[str, str]:
    return {r.instance_id: r.state for r in await rows(agents, template)}


def definition(name: str, **changes: Any) -> dict[str, Any]:
    found = next(d for d in builtin_definitions() if d["name"] == name)
    return {**found, **changes}


async def test_start_creates_the_minimum_per_template(
    pool: Pool, registry: AgentRegistry, instances: InstancePool
) -> None:
    rows = await recorded_instances(pool)
    assert sorted(r.template_name for r in rows) == sorted(t.name for t in registry.all())
    assert {r.state for r in rows} == {"IDLE"}
    assert all(r.template_version == registry.get(r.template_name).version for r in rows)


async def test_sessions_in_sequence_reuse_one_instance_and_share_nothing(
    pool: Pool, instances: InstancePool
) -> None:
    store = SessionStore(pool)
    for sid in ("s-one", "s-two"):
        await store.ensure_session(sid, agent="coder")
    closed: list[str] = []
    async with instances.lease("coder", "s-one") as first:
        assert first.state is InstanceState.BUSY and first.session_id == "s-one"
        first.scratch.update(history=["secret of s-one"], budget={"iterations": 7})
        first.on_reset(lambda: closed.append("s-one cache"))
        assert (await states(instances, "coder"))[first.instance_id] == "BUSY"
        with pytest.raises(TypeError):
            first.clients["session"] = "s-one"  # type: ignore[index]
    assert closed == ["s-one cache"]
    assert (await states(instances, "coder"))[first.instance_id] == "IDLE"
    async with instances.lease("coder", "s-two") as second:
        assert second is first  # the same long-lived worker ...
        # ... holding nothing of s-one: only its new session's id.
        assert second.scratch == {} and second.leftovers() == ["session_id=s-two"]
        assert second.session_id == "s-two" and second.clients["llm"] is SHARED["llm"]
    await instances.settled()  # the rows are written behind memory
    row = await pool.fetchrow(
        "select instance_id, template_version from orchestrator.sessions where session_id = $1",
        "s-two",
    )
    assert row is not None and row["instance_id"] == first.instance_id
    assert row["template_version"] == first.template.version
    recorded = {r.instance_id: r for r in await rows(instances, "coder")}
    assert recorded[first.instance_id].last_used_at is not None
    assert recorded[first.instance_id].session_id is None


async def test_a_lease_beyond_the_maximum_waits_then_fails_clearly(
    instances: InstancePool,
) -> None:
    async with instances.lease("ask", "a1") as one, instances.lease("ask", "a2") as two:
        assert one is not two and len(instances.live("ask")) == 2
        with pytest.raises(PoolExhausted, match="all 2 instances of 'ask'"):
            async with instances.lease("ask", "a3", wait=0.2):
                pass


async def test_a_waiting_lease_gets_the_instance_released_first(
    instances: InstancePool,
) -> None:
    release = asyncio.Event()

    async def hold(sid: str) -> str:
        async with instances.lease("debug", sid) as held:
            await release.wait()
            return held.instance_id

    holders = [asyncio.create_task(hold(f"d{i}")) for i in range(2)]
    await asyncio.sleep(0.1)
    waiter = asyncio.create_task(_lease_id(instances, "debug", "d-late"))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    release.set()
    assert await waiter in set(await asyncio.gather(*holders))


async def test_a_lease_takes_the_instance_released_last_and_never_a_busy_one(
    instances: InstancePool,
) -> None:
    async with instances.lease("debug", "e1") as first, instances.lease("debug", "e2") as second:
        assert first is not second
    # The inner lease ended first: `first` was released last, and is the one kept warm.
    async with instances.lease("debug", "e3") as warm:
        assert warm is first
        async with instances.lease("debug", "e4") as other:
            assert other is second and other.session_id == "e4"
    assert {i.state for i in instances.live("debug")} == {InstanceState.IDLE}


async def test_sync_retires_idle_instances_of_an_old_version(
    pool: Pool, registry: AgentRegistry, instances: InstancePool
) -> None:
    async with instances.lease("ask", "s1"), instances.lease("ask", "s2"):
        pass  # two idle instances of the current version
    old = {i.instance_id for i in instances.live("ask")}
    assert len(old) == 2
    prompt = {"system_prompt": "Short answers."}
    await TemplateStore(pool).write(definition("ask", prompt_pack=prompt), "admin")
    await registry.reload(pool)
    await instances.sync()
    live = instances.live("ask")
    assert len(live) == 1 and live[0].instance_id not in old  # the minimum, of the new one
    async with instances.lease("ask", "s3") as current:
        assert current is live[0] and current.template.system_prompt == "Short answers."
    recorded = await states(instances, "ask")
    assert set(recorded) == {live[0].instance_id}


async def _lease_id(instances: InstancePool, template: str, sid: str) -> str:
    async with instances.lease(template, sid, wait=5) as instance:
        return instance.instance_id


async def test_a_failed_session_is_counted_and_the_instance_recovers(
    pool: Pool, instances: InstancePool
) -> None:
    with pytest.raises(RuntimeError, match="tool exploded"):
        async with instances.lease("architect", "f1") as broken:
            broken.scratch["half-written"] = True
            raise RuntimeError("tool exploded")
    assert broken.state is InstanceState.IDLE and broken.failures == 1
    assert broken.scratch == {}
    recorded = {r.instance_id: r for r in await rows(instances, "architect")}
    assert recorded[broken.instance_id].failures == 1
    assert recorded[broken.instance_id].state == "IDLE"
    async with instances.lease("architect", "f2") as next_one:
        assert next_one is broken


async def test_an_instance_whose_cleanup_fails_is_replaced(
    pool: Pool, instances: InstancePool
) -> None:
    def leaky_close() -> None:
        raise OSError("cursor would not close")

    async with instances.lease("coder", "c1") as dirty:
        dirty.on_reset(leaky_close)
    assert dirty.state is InstanceState.ERROR
    assert dirty not in instances.live("coder") and len(instances.live("coder")) == 1
    recorded = await states(instances, "coder")
    assert recorded[dirty.instance_id] == "ERROR"
    assert sorted(recorded.values()) == ["ERROR", "IDLE"]
    async with instances.lease("coder", "c2") as fresh:
        assert fresh is not dirty and fresh.scratch == {}


async def test_a_lease_pins_the_version_and_new_leases_get_the_new_one(
    pool: Pool, registry: AgentRegistry, instances: InstancePool
) -> None:
    before = registry.get("ask").version
    prompt = {"system_prompt": "You answer questions in one sentence."}
    async with instances.lease("ask", "v1") as pinned:
        await TemplateStore(pool).write(definition("ask", prompt_pack=prompt), "admin")
        await registry.reload(pool)
        assert registry.get("ask").version == before + 1
        assert pinned.template.version == before  # the running session keeps its version
    assert pinned.state is InstanceState.STOPPED
    async with instances.lease("ask", "v2") as current:
        assert current.template.version == before + 1
        assert current.template.system_prompt == prompt["system_prompt"]
    assert (await states(instances, "ask")).get(pinned.instance_id) is None  # STOPPED: not listed


async def test_close_stops_every_instance_of_the_process(
    pool: Pool, registry: AgentRegistry
) -> None:
    agents = InstancePool(pool, registry, 2, 3)
    await agents.start()
    assert len(await recorded_instances(pool)) == 2 * len(registry.all())
    await agents.close()
    assert await recorded_instances(pool) == []
    stopped = await recorded_instances(pool, include_stopped=True)
    assert {r.state for r in stopped} == {"STOPPED"}


async def test_template_versions_change_only_with_the_definition(pool: Pool) -> None:
    await install_templates(pool)
    store = TemplateStore(pool)
    coder = definition("coder")
    row, changed = await store.write(coder, "admin")
    assert not changed and row is not None and row.version == 1
    row, changed = await store.write({**coder, "description": "Writes code."}, "admin")
    assert changed and row is not None and row.version == 2 and row.source == "admin"
    assert await store.tools_of("coder", 2) == {
        "*": "optional", "attempt_completion": "required", "ask_followup_question": "required",
    }  # fmt: skip
    # A restart installs the built-ins again: the admin's version stays the served one.
    templates = {t.name: t for t in await install_templates(pool)}
    assert templates["coder"].version == 2 and templates["coder"].description == "Writes code."
    assert await store.deactivate("coder") == 2
    await install_templates(pool)
    assert "coder" not in await store.active_names()
    row, changed = await store.write({**coder, "description": "Writes code."}, "admin")
    assert changed and row is not None and row.version == 3 and row.active


async def test_session_state_follows_the_seed_machine(pool: Pool) -> None:
    await SessionStore(pool).ensure_session("st-1")
    assert await get_state(pool, "st-1") is SessionState.INITED
    assert await set_state(pool, "st-1", "RESEARCHING") is SessionState.INITED
    await set_state(pool, "st-1", SessionState.WAITING_FOR_CLARIFICATION)
    await set_state(pool, "st-1", SessionState.RESEARCHING)
    await set_state(pool, "st-1", SessionState.COMPLETED)
    row = await pool.fetchrow(
        "select started_at, finished_at from orchestrator.sessions where session_id = 'st-1'"
    )
    assert row is not None and row["started_at"] and row["finished_at"]
    with pytest.raises(InvalidTransition, match="COMPLETED to WAITING_FOR_CLARIFICATION"):
        await set_state(pool, "st-1", SessionState.WAITING_FOR_CLARIFICATION)
    assert await get_state(pool, "st-1") is SessionState.COMPLETED
    await set_state(pool, "st-1", SessionState.RESEARCHING)  # the next task of the chat
    finished = await pool.fetchval(
        "select finished_at from orchestrator.sessions where session_id = 'st-1'"
    )
    assert finished is None


async def test_session_state_of_an_unknown_session(pool: Pool) -> None:
    from services.orchestrator.errors import SessionNotFound

    with pytest.raises(SessionNotFound):
        await set_state(pool, "nope", SessionState.RESEARCHING)
    with pytest.raises(InvalidTransition, match="unknown session state"):
        await set_state(pool, "nope", "DANCING")


async def test_the_mirror_rows_leave_the_connection_flushing(
    database_url: str, registry: AgentRegistry
) -> None:
    """The rows mirror memory and are written without waiting for the WAL flush; the
    setting is the statement's own, not the pooled connection's."""
    single = await create_pool(database_url, min_size=1, max_size=1)
    agents = InstancePool(single, registry, 0, 2)
    try:
        async with agents.lease("ask", "m1") as leased:
            assert (await states(agents, "ask"))[leased.instance_id] == "BUSY"
        assert (await states(agents, "ask"))[leased.instance_id] == "IDLE"
        assert await single.fetchval("show synchronous_commit") == "on"
    finally:
        await agents.close()
        await single.close()
