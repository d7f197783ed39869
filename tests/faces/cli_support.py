"""codelab driven in-process against the test mesh: a person who answers from a script."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from clients.cli.connection import Connection
from clients.cli.driver import Driver
from clients.cli.person import CallDecision, Event, PatchReview, Person, PlanDecision
from clients.cli.tools import Toolbox
from clients.cli.view import RichView
from clients.cli.workspace import Workspace
from tests.support.mesh import Mesh

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ScriptedPerson:
    """Answers approvals, plans, patch reviews and questions from lists, and keeps what it
    was shown."""

    calls: list[CallDecision] = field(default_factory=list)
    plans: list[PlanDecision] = field(default_factory=list)
    reviews: list[PatchReview] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    previews: list[str] = field(default_factory=list)
    plan_steps: list[list[Event]] = field(default_factory=list)
    reviewed: list[str] = field(default_factory=list)

    async def review_call(self, call: Event, preview: str) -> CallDecision:
        self.previews.append(preview)
        return self.calls.pop(0)

    async def review_plan(self, request: Event, steps: list[Event]) -> PlanDecision:
        self.plan_steps.append(steps)
        return self.plans.pop(0)

    async def review_patch(self, patch: str, description: str | None) -> PatchReview:
        self.reviewed.append(patch)
        return self.reviews.pop(0)

    async def answer(self, question: str, options: list[str]) -> str:
        return self.answers.pop(0)


@dataclass
class Cli:
    driver: Driver
    person: ScriptedPerson
    screen: io.StringIO

    @property
    def text(self) -> str:
        return self.screen.getvalue()


@asynccontextmanager
async def connected(
    mesh: Mesh, person: Person, view: RichView, workspace: Path, session_id: str
) -> AsyncIterator[Driver]:
    """A driver for ``person`` connected to the mesh's gateway (ripgrep off: the Python path)."""
    space = Workspace(workspace)
    connection = Connection(mesh.gateway_url, session_id)
    await connection.open()
    try:
        yield Driver(connection, Toolbox(space, person, ripgrep=None), person, view, space)
    finally:
        await connection.close()


@asynccontextmanager
async def codelab(mesh: Mesh, workspace: Path, session_id: str) -> AsyncIterator[Cli]:
    """A connected driver whose terminal is a string."""
    screen = io.StringIO()
    view = RichView(Console(file=screen, width=120, force_terminal=False, highlight=False))
    person = ScriptedPerson()
    async with connected(mesh, person, view, workspace, session_id) as driver:
        yield Cli(driver, person, screen)


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a codelab subprocess: this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("CODELAB_URL", None)
    return env


CLI = [sys.executable, "-m", "clients.cli"]


async def run_codelab(*args: str, cwd: Path, **env: str) -> tuple[int, list[dict[str, Any]], str]:
    """``codelab ARGS`` in ``cwd``: its status, the JSON lines it printed, its stderr."""
    process = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        cwd=cwd,
        env=cli_env(**env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    return process.returncode or 0, lines, err.decode()
