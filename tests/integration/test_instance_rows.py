"""The instance rows are written behind memory: what is queued together is one statement,
each instance's latest state wins, failures add up, and a failed write is healed by the
instance's next change."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from services.common.db import Pool
from services.orchestrator.agents.agent_instance import AgentInstance, InstanceState
from services.orchestrator.agents.instance_rows import InstanceRows
from services.orchestrator.agents.template_store import recorded_instances
from services.orchestrator.agents.templates import AgentRegistry, install_templates
from services.orchestrator.state.store import SessionStore


class Counting:
    """The pool, counting the statements sent through it."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.statements = 0

    async def execute(self, query: str, *args: Any) -> str:
        self.statements += 1
        done: str = await self.pool.execute(query, *args)
        return done


@pytest.fixture
async def registry(pool: Pool) -> AgentRegistry:
    return AgentRegistry(await install_templates(pool), multi_agent_mode=True)


def leased(instance: AgentInstance, session_id: str) -> AgentInstance:
    instance.state, instance.session_id = InstanceState.BUSY, session_id
    return instance


async def test_what_is_queued_together_is_one_statement(
    pool: Pool, registry: AgentRegistry
) -> None:
    store, counting = SessionStore(pool), Counting(pool)
    rows = InstanceRows(counting, "node-a")
    coder = registry.get("coder")
    instances = [AgentInstance(coder, {}) for _ in range(20)]
    for n in range(len(instances)):
        await store.ensure_session(f"rows-{n}", agent="coder")
    for n, instance in enumerate(instances):
        rows.put(leased(instance, f"rows-{n}"), leased=True)
    await rows.settled()
    assert counting.statements == 1
    recorded = {r.instance_id: r for r in await recorded_instances(pool, "coder")}
    assert {recorded[i.instance_id].state for i in instances} == {"BUSY"}
    assert recorded[instances[3].instance_id].session_id == "rows-3"
    assert recorded[instances[3].instance_id].last_used_at is not None
    served = await pool.fetchrow(
        "select instance_id, template_version from orchestrator.sessions where session_id = $1",
        "rows-7",
    )
    assert tuple(served) == (instances[7].instance_id, coder.version)


async def test_the_latest_state_wins_and_failures_add_up(
    pool: Pool, registry: AgentRegistry
) -> None:
    await SessionStore(pool).ensure_session("rows-f", agent="ask")
    rows = InstanceRows(pool, "node-b")
    instance = AgentInstance(registry.get("ask"), {})
    rows.put(leased(instance, "rows-f"), leased=True)
    instance.state = InstanceState.RESETTING
    instance.session_id = None  # cleaning up forgets the session in memory
    rows.put(instance, added_failures=1)
    await rows.settled()
    [row] = [
        r for r in await recorded_instances(pool, "ask") if r.instance_id == instance.instance_id
    ]
    assert (row.state, row.failures, row.session_id) == ("RESETTING", 1, "rows-f")
    instance.state = InstanceState.IDLE
    rows.put(instance, added_failures=1)
    await rows.settled()
    [row] = [
        r for r in await recorded_instances(pool, "ask") if r.instance_id == instance.instance_id
    ]
    assert (row.state, row.failures, row.session_id) == ("IDLE", 2, None)
    assert row.last_used_at is not None  # kept from the lease


async def test_a_failed_write_is_logged_and_the_next_change_heals_the_row(
    pool: Pool, registry: AgentRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    rows = InstanceRows(pool, "node-c")
    ask = registry.get("ask")
    good = AgentInstance(ask, {})
    # No such version: the whole statement fails (a foreign key), this row with it.
    bad = AgentInstance(dataclasses.replace(ask, version=ask.version + 99), {})
    with caplog.at_level(logging.WARNING):
        rows.put(good)
        rows.put(bad)
        await rows.settled()
    assert "instance rows not written" in caplog.text
    ids = {r.instance_id for r in await recorded_instances(pool, "ask")}
    assert good.instance_id not in ids
    rows.put(leased(good, "nobody"), leased=True)  # a session that does not exist: no row to mark
    await rows.settled()
    [row] = [r for r in await recorded_instances(pool, "ask") if r.instance_id == good.instance_id]
    assert (row.state, row.session_id, row.runtime_node) == ("BUSY", "nobody", "node-c")
