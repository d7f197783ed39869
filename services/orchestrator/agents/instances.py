"""The agent instance pool (seed 003 sections 2.2 and 3.2): long-lived workers per template.

An instance (agent_instance.py) is built from one template version, pinned: an admin's
new version reaches new leases, never a running one. ``lease`` hands out an IDLE instance
(the most recently released, so few stay warm) or creates one up to ``max_per_template``;
beyond that it waits, then fails with PoolExhausted. Release walks the seed's machine
(Postgres gets the state it ends in, one write)::

    BUSY -> RESETTING -> cleanup() -> IDLE            (session finished or cancelled)
    BUSY -> ERROR -> RESETTING -> cleanup() -> IDLE   (the session's run raised)
    RESETTING -> ERROR (kept for inspection, replaced) when cleanup fails

Memory is authoritative: Postgres mirrors each state change (``agent_instances``) for
admins and for other replicas to read, written behind memory (instance_rows.py).
``min_per_template`` idle instances are kept per served template; ``sync`` follows the
registry after an admin change.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

from services.common.db import Pool, db_errors
from services.common.errors import InvalidInput, ServiceError, Unavailable
from services.common.sql import load_queries
from services.orchestrator.agents.agent_instance import AgentInstance, InstanceState
from services.orchestrator.agents.instance_rows import InstanceRows
from services.orchestrator.agents.templates import AgentRegistry, AgentTemplate
from services.orchestrator.errors import CleanupFailed, PoolExhausted
from services.orchestrator.state import SQL_DIR

log = logging.getLogger(__name__)
QUERIES = load_queries(SQL_DIR / "templates.sql")
DEFAULT_MAX_PER_TEMPLATE = 2048
"""AGENT_INSTANCES_MAX's default (see Settings.agent_instances_max)."""
__all__ = [
    "DEFAULT_MAX_PER_TEMPLATE",
    "AgentInstance",
    "InstancePool",
    "InstanceState",
]


class InstancePool:
    """Instances per template, between ``min_per_template`` and ``max_per_template``."""

    def __init__(
        self,
        pool: Pool,
        registry: AgentRegistry,
        min_per_template: int = 1,
        max_per_template: int = DEFAULT_MAX_PER_TEMPLATE,
        *,
        clients: Mapping[str, Any] | None = None,
        lease_timeout: float = 30.0,
        refresh_every: float = 5.0,
    ) -> None:
        if not 0 <= min_per_template <= max_per_template or max_per_template < 1:
            raise InvalidInput("need 0 <= min_per_template <= max_per_template, max >= 1")
        self.pool = pool
        self.registry = registry
        self.min = min_per_template
        self.max = max_per_template
        self.clients: Mapping[str, Any] = MappingProxyType(dict(clients or {}))
        self.lease_timeout = lease_timeout
        self.refresh_every = refresh_every
        # Rows of this process; replicas share the table.
        self.node = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._live: dict[str, list[AgentInstance]] = defaultdict(list)
        # The IDLE ones among them, the most recently released last: a lease takes one
        # without walking every busy instance.
        self._idle: dict[str, list[AgentInstance]] = defaultdict(list)
        self._changed = asyncio.Condition()
        self._closed = False
        self.rows = InstanceRows(pool, self.node)

    def live(self, template_name: str) -> list[AgentInstance]:
        """The instances that can serve ``template_name`` now or after their session."""
        return list(self._live[template_name])

    async def start(self) -> None:
        """Create the minimum of instances for every served template (rows written)."""
        await self.sync()
        await self.settled()

    async def sync(self) -> None:
        """Follow the registry: retire idle instances of old versions or of templates no
        longer served, and top every served template up to the minimum."""
        served = {t.name: t for t in self.registry.all()}
        async with self._changed:
            for name, idle in self._idle.items():
                for instance in [i for i in idle if not self._current(i.template)]:
                    idle.remove(instance)
                    self._live[name].remove(instance)
                    instance.state = InstanceState.STOPPED
                    self.rows.put(instance)
        for template in served.values():
            await self._top_up(template)

    async def close(self) -> None:
        """Stop every instance of this process (their rows say STOPPED)."""
        async with self._changed:
            self._closed = True
            for live in self._live.values():
                for instance in live:
                    instance.state = InstanceState.STOPPED
            self._live.clear()
            self._idle.clear()
            self._changed.notify_all()
        await self.settled()  # nothing queued may overwrite the rows stopped below
        try:
            async with db_errors("stop instances", "DB_WRITE_ERROR"):
                await self.pool.execute(QUERIES["stop_node_instances"], self.node)
        except ServiceError as error:
            # Shutting down with Postgres away: the rows stay as they were; shutdown goes on.
            log.warning("instances not marked stopped", extra={"fields": {"err": error.message}})

    @contextlib.asynccontextmanager
    async def lease(
        self,
        template_name: str,
        session_id: str,
        wait: float | None = None,
        pinned: AgentTemplate | None = None,
    ) -> AsyncIterator[AgentInstance]:
        """An instance of the template's current version (or of ``pinned``, the version
        the session's task runs on), BUSY for ``session_id``; waits up to ``wait`` seconds
        (default ``lease_timeout``) for one to become free. An instance of a version no
        longer served is recycled (STOPPED) when it comes back."""
        wait = wait or self.lease_timeout
        instance = await self._acquire(template_name, session_id, wait, pinned)
        failed = False
        try:
            yield instance
        except Exception:
            failed = True  # cancellation is a normal end of a session, not a failure
            raise
        finally:
            # Shielded: a second cancel must not leave the instance BUSY forever.
            await asyncio.shield(self._release(instance, failed))

    async def settled(self) -> None:
        """Wait until the rows of every change so far are written (see instance_rows.py)."""
        await self.rows.settled()

    async def _acquire(
        self, name: str, session_id: str, wait: float, pinned: AgentTemplate | None = None
    ) -> AgentInstance:
        """The instance, BUSY in memory; its row is queued (the lease goes on while it is
        written: the row is for admins and other replicas, memory rules)."""
        await self.registry.refresh(self.pool, self.refresh_every)
        deadline = asyncio.get_running_loop().time() + wait
        async with self._changed:
            while True:
                if self._closed:
                    raise Unavailable("the instance pool is stopping", code="SERVICE_UNAVAILABLE")
                template = pinned or self.registry.get(name)
                live, idle = self._live[name], self._idle[name]
                version = template.version
                fresh = next(
                    (
                        k
                        for k in range(len(idle) - 1, -1, -1)
                        if idle[k].template.version == version
                    ),
                    None,
                )
                if fresh is not None:
                    instance = idle.pop(fresh)
                    break
                stale = next((i for i in idle if not self._current(i.template)), None)
                if stale is not None:  # an old version: give its slot to the current one
                    idle.remove(stale)
                    live.remove(stale)
                    stale.state = InstanceState.STOPPED
                    self.rows.put(stale)
                    continue
                if len(live) < self.max:
                    instance = AgentInstance(template, self.clients)
                    live.append(instance)
                    break
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    await asyncio.wait_for(self._changed.wait(), max(remaining, 0))
                except TimeoutError:
                    raise PoolExhausted(
                        f"all {self.max} instances of {name!r} stayed busy for {wait:g}s",
                        template=name,
                    ) from None
            instance.state, instance.session_id = InstanceState.BUSY, session_id
        instance.last_used_at = dt.datetime.now(dt.UTC)
        self.rows.put(instance, leased=True)
        return instance

    async def _release(self, instance: AgentInstance, failed: bool) -> None:
        if self._closed:  # close() recorded every instance STOPPED: forget the session only
            try:
                instance.cleanup()
            except CleanupFailed as error:
                log.warning("instance stopped unclean: %s", error.message)
            return
        failures = 0
        if failed:  # BUSY -> ERROR, then recover() below
            instance.failures += 1
            failures = 1
        # BUSY -> (ERROR ->) RESETTING -> IDLE happens here without an await in between:
        # only the state it ends in is written.
        instance.state = InstanceState.RESETTING
        try:
            instance.cleanup()
        except CleanupFailed as error:
            log.warning("instance replaced: %s", error.message)
            await self._replace(instance, InstanceState.ERROR, failures)
            return
        if not self._current(instance.template):
            # Pinned to a version now gone.
            await self._replace(instance, InstanceState.STOPPED, failures)
            return
        async with self._changed:
            instance.state = InstanceState.IDLE
            self._idle[instance.template.name].append(instance)
            self._changed.notify_all()
        self.rows.put(instance, added_failures=failures)

    def _current(self, template: AgentTemplate) -> bool:
        """True while ``template`` is the version the registry serves."""
        name = template.name
        return self.registry.has(name) and self.registry.get(name).version == template.version

    async def _replace(
        self, instance: AgentInstance, state: InstanceState, failures: int = 0
    ) -> None:
        """Retire ``instance`` and keep the template's minimum of the served version."""
        await self._drop(instance, state, failures)
        name = instance.template.name
        if self.registry.has(name):
            await self._top_up(self.registry.get(name))

    async def _drop(self, instance: AgentInstance, state: InstanceState, failures: int = 0) -> None:
        """Take ``instance`` out of service in ``state`` and wake the waiting leases."""
        async with self._changed:
            with contextlib.suppress(ValueError):  # already gone after close()
                self._live[instance.template.name].remove(instance)
            with contextlib.suppress(ValueError):  # only an idle one is there
                self._idle[instance.template.name].remove(instance)
            instance.state = state
            self._changed.notify_all()
        self.rows.put(instance, added_failures=failures)

    async def _top_up(self, template: AgentTemplate) -> None:
        """Create idle instances of ``template`` until the minimum is reached."""
        async with self._changed:
            live, idle = self._live[template.name], self._idle[template.name]
            while len(live) < self.min:
                instance = AgentInstance(template, self.clients)
                live.append(instance)
                idle.append(instance)
                self.rows.put(instance)
            self._changed.notify_all()
