"""Agent template versions in Postgres (``orchestrator.agent_templates``), and the read
side of ``agent_instances`` for admins.

Every write goes through ``write``: under a per-name advisory lock it compares the
canonical definition with the newest version and inserts version + 1 only when it
differs (or when the template was deactivated: writing it again brings it back). The
tools a version names are recorded in ``agent_template_tools`` in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg

from services.common.db import Pool, db_errors
from services.common.errors import InvalidInput
from services.common.sql import load_queries
from services.orchestrator.agents.template_rules import canonical
from services.orchestrator.errors import AgentNotFound
from services.orchestrator.state import SQL_DIR

QUERIES = load_queries(SQL_DIR / "templates.sql")
Source = Literal["builtin", "admin"]


@dataclass(frozen=True)
class TemplateRow:
    """One stored version of a template."""

    name: str
    version: int
    definition: Mapping[str, Any]
    """The canonical definition (template_rules.canonical)."""
    active: bool
    source: str
    """builtin (agent_templates.json) or admin (written through AgentAdmin)."""
    created_at: dt.datetime


def _row(record: asyncpg.Record) -> TemplateRow:
    return TemplateRow(
        name=record["name"],
        version=record["version"],
        definition=record["definition"],
        active=record["active"],
        source=record["source"],
        created_at=record["created_at"],
    )


def _same(stored: Mapping[str, Any], definition: Mapping[str, Any]) -> bool:
    """Equal meaning: a row in the first, flat shape (or written by hand) counts as its
    canonical form, so re-sending it does not make a version."""
    try:
        return stored == definition or canonical(stored) == definition
    except InvalidInput:  # a hand-written row that no longer validates: it did change
        return False


class TemplateStore:
    """Reads and versioned writes of agent templates."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def write(
        self, definition: Mapping[str, Any], source: Source, *, yield_to_admin: bool = False
    ) -> tuple[TemplateRow | None, bool]:
        """(newest row, whether a version was written) for a canonical ``definition``.

        ``yield_to_admin`` (installing built-ins): leave a template alone when an admin
        wrote its newest version or deactivated it, so a restart never undoes their
        change; the row is None when the template does not exist and nothing was written.
        """
        name = definition["name"]
        async with (
            db_errors("save template", "DB_WRITE_ERROR"),
            self.pool.acquire() as conn,
            conn.transaction(),
        ):
            await conn.execute(QUERIES["lock_template"], name)
            head = await conn.fetchrow(QUERIES["template_head"], name)
            if head is not None:
                current = _row(head)
                admin_owned = current.source == "admin" or not head["any_active"]
                if yield_to_admin and admin_owned:
                    return current, False
                if _same(current.definition, definition) and head["any_active"]:
                    return current, False
            version = 1 if head is None else head["version"] + 1
            row = _row(
                await conn.fetchrow(
                    QUERIES["insert_template"], name, version, dict(definition), source
                )
            )
            policy = definition["tool_policy"]
            named = list(dict.fromkeys([*policy["allowed"], *policy["required"]]))
            await conn.execute(
                QUERIES["insert_template_tools"], name, version, named, policy["required"]
            )
        return row, True

    async def unembedded(self) -> list[TemplateRow]:
        """Active versions whose capability text has no vector yet."""
        async with db_errors("read templates", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["unembedded_templates"])
        return [_row(r) for r in rows]

    async def set_embedding(self, name: str, version: int, vector: list[float]) -> None:
        literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"  # pgvector's text form
        async with db_errors("save template embedding", "DB_WRITE_ERROR"):
            await self.pool.execute(QUERIES["set_template_embedding"], name, version, literal)

    async def latest(self, *, include_inactive: bool = False) -> list[TemplateRow]:
        """The newest (active, unless ``include_inactive``) version of each template."""
        async with db_errors("read templates", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["latest_templates"], include_inactive)
        return [_row(r) for r in rows]

    async def versions(self, name: str = "", *, include_inactive: bool = True) -> list[TemplateRow]:
        """Every version (of ``name``, or of all templates), newest first per name."""
        async with db_errors("read templates", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["template_versions"], name, include_inactive)
        return [_row(r) for r in rows]

    async def get(self, name: str, version: int | None = None) -> TemplateRow:
        """One version, or the newest (active or not); AgentNotFound when there is none."""
        async with db_errors("read template", "DB_READ_ERROR"):
            row = await self.pool.fetchrow(QUERIES["get_template"], name, version)
        if row is None:
            which = f"version {version} of " if version is not None else ""
            raise AgentNotFound(f"no {which}agent template {name!r}", agent=name)
        return _row(row)

    async def active_names(self) -> set[str]:
        async with db_errors("read templates", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["active_template_names"])
        return {r["name"] for r in rows}

    async def deactivate(self, name: str) -> int:
        """Deactivate every version of ``name``; returns how many were active.

        AgentNotFound when the template never existed; deactivating twice is a no-op.
        """
        async with (
            db_errors("deactivate template", "DB_WRITE_ERROR"),
            self.pool.acquire() as conn,
            conn.transaction(),
        ):
            await conn.execute(QUERIES["lock_template"], name)
            if await conn.fetchrow(QUERIES["template_head"], name) is None:
                raise AgentNotFound(f"no agent template {name!r}", agent=name)
            rows = await conn.fetch(QUERIES["deactivate_template"], name)
        return len(rows)

    async def tools_of(self, name: str, version: int) -> dict[str, str]:
        """{tool name: required | optional} as recorded for one version ('*': every tool)."""
        async with db_errors("read template tools", "DB_READ_ERROR"):
            rows = await self.pool.fetch(QUERIES["template_tools"], name, version)
        return {r["tool_name"]: r["role"] for r in rows}


@dataclass(frozen=True)
class InstanceRow:
    """An agent instance as recorded (by any replica) in ``agent_instances``."""

    instance_id: str
    template_name: str
    template_version: int
    state: str
    session_id: str | None
    runtime_node: str
    failures: int
    last_used_at: dt.datetime | None
    created_at: dt.datetime


async def recorded_instances(
    pool: Pool, template: str = "", *, include_stopped: bool = False
) -> list[InstanceRow]:
    """The instances of every replica (of ``template``, or all), by template and age."""
    async with db_errors("read instances", "DB_READ_ERROR"):
        rows = await pool.fetch(QUERIES["list_instances"], template, include_stopped)
    return [InstanceRow(**dict(r)) for r in rows]
