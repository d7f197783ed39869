"""The mesh under test: ``python -m services.supervisor`` on free ports, as ``make run`` runs it.

The bench starts the embedded Postgres itself (under ``bench/.data``) so it knows the DSN
for its own SQL and where the postmaster is; every run gets a fresh database, dropped
afterwards, so one run's rows never slow the next. Everything else is the embedded
default: the built-in scripted model, INFO logs, metrics on, multi-agent mode unless asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import secrets
import signal
import sys
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from clients.python import MeshClient
from services.common.embedded_pg import EmbeddedPostgres, start_embedded
from services.common.ports import free_port, free_port_pair

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "bench" / ".data"
PGDATA = DATA_DIR / "postgres"
METRICS_OFFSET = 7
GRPC_SERVICES = ("ORCHESTRATOR", "TOOLSEARCH", "HITL", "LLMPROXY")
READY_SECONDS = 120
FIELDS_SHOWN = 200
"""Characters of a problem's first ``fields`` the bench prints."""


def raise_open_file_limit() -> int:
    """Soft NOFILE up to the hard limit; the supervisor's children inherit it.

    Every live WebSocket costs a descriptor in the bench, the gateway and (as a gRPC
    stream) nothing more, but 1,000 of them exceed the common default of 1,024.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def with_database(dsn: str, name: str) -> str:
    """The same server DSN pointing at database ``name``."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


@dataclass
class BenchMesh:
    """A running supervisor-run mesh and what the bench needs to reach it."""

    process: asyncio.subprocess.Process
    env: dict[str, str]
    database_url: str
    output: deque[str] = field(default_factory=lambda: deque(maxlen=300))
    problems: Counter[str] = field(default_factory=Counter)
    """Warning and error log lines of the children, counted by service, level and message."""
    first_fields: dict[str, str] = field(default_factory=dict)
    """Each problem's first line's ``fields`` (what the count alone does not say: which
    error a retry met), shortened."""
    unhandled: Counter[str] = field(default_factory=Counter)
    """Lines (JSON or not) that show an unhandled exception, counted by service and marker."""

    def addr(self, name: str) -> str:
        """``host:port`` of a gRPC service (``orchestrator``, ``toolsearch``, ...)."""
        return self.env[f"{name.upper()}_ADDR"]

    @property
    def gateway(self) -> str:
        """The gateway's base URL (HTTP; the IDE client turns it into ``ws://``)."""
        return f"http://127.0.0.1:{self.env['GATEWAY_PORT']}"

    @property
    def model(self) -> str:
        """The scripted model's root URL (``/v1`` and ``/_scripted`` live under it)."""
        return f"http://127.0.0.1:{self.env['SCRIPTED_MODEL_PORT']}"

    @property
    def multi_agent(self) -> bool:
        """Whether this mesh runs with MULTI_AGENT_MODE (the default)."""
        return self.env.get("MULTI_AGENT_MODE", "true") != "false"

    def client(self) -> MeshClient:
        """The project's own client, with this run's internal key."""
        return MeshClient(
            internal_api_key=self.env["INTERNAL_API_KEY"],
            orchestrator_addr=self.addr("orchestrator"),
            toolsearch_addr=self.addr("toolsearch"),
            hitl_addr=self.addr("hitl"),
            llmproxy_addr=self.addr("llmproxy"),
        )


UNHANDLED = (
    "Exception in ASGI application",
    "Task exception was never retrieved",
    "Task was destroyed but it is pending",
)
"""Log text that means an exception nobody handled (a crash the caller never heard of)."""


def unhandled_marker(text: str) -> str | None:
    """``service: marker`` for a log line showing an unhandled exception, else None (a
    line that is not JSON, such as a traceback printed to stderr, counts as ``?``)."""
    marker = next((m for m in UNHANDLED if m in text), None)
    if marker is None:
        return None
    try:
        service = json.loads(text).get("service") or "?"
    except (ValueError, AttributeError):
        service = "?"
    return f"{service}: {marker}"


def _problem(text: str) -> tuple[str, str] | None:
    """(``service level: msg``, its ``fields`` shortened) for a warning or error JSON log
    line, else None."""
    if '"level": "warning"' not in text and '"level": "error"' not in text:
        return None  # most lines: skip the JSON parse
    try:
        entry = json.loads(text)
    except ValueError:
        return None
    # The first line only: a traceback or a task name would make every line unique.
    message = str(entry.get("msg")).splitlines()[0][:120] if entry.get("msg") else ""
    fields = json.dumps(entry.get("fields") or {}, sort_keys=True)[:FIELDS_SHOWN]
    return f"{entry.get('service')} {entry.get('level')}: {message}", fields


async def _drain(stream: asyncio.StreamReader, mesh: BenchMesh, ready: asyncio.Event) -> None:
    # Children log JSON lines to the supervisor's stderr: read them all, or a full pipe
    # would block the mesh. The tail is kept for a failure report, problems are counted.
    while line := await stream.readline():
        text = line.decode(errors="replace")
        mesh.output.append(text)
        problem = _problem(text)
        if problem is not None:
            mesh.problems[problem[0]] += 1
            mesh.first_fields.setdefault(*problem)
        unhandled = unhandled_marker(text)
        if unhandled is not None:
            mesh.unhandled[unhandled] += 1
        if "is up" in text:
            ready.set()


@contextlib.asynccontextmanager
async def embedded_server() -> AsyncIterator[EmbeddedPostgres]:
    """The bench's own embedded Postgres (shared by every mesh of the run)."""
    server = await asyncio.to_thread(start_embedded, PGDATA)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def fresh_database(server_dsn: str) -> AsyncIterator[str]:
    """A new empty database for one mesh; the services migrate it at start."""
    name = f"bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"create database {name}")
    finally:
        await admin.close()
    try:
        yield with_database(server_dsn, name)
    finally:
        admin = await asyncpg.connect(server_dsn)
        try:
            await admin.execute(f"drop database if exists {name} with (force)")
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def running_mesh(
    server_dsn: str,
    *,
    token_delay_ms: int,
    multi_agent: bool = True,
    extra_env: Mapping[str, str] | None = None,
) -> AsyncIterator[BenchMesh]:
    """Start the supervisor on free ports against a fresh database; stop it afterwards."""
    async with fresh_database(server_dsn) as dsn:
        env = {
            **os.environ,
            "DATABASE_URL": dsn,
            "CODELAB_DATA_DIR": str(DATA_DIR),
            "INTERNAL_API_KEY": secrets.token_urlsafe(24),
            "GATEWAY_PORT": str(free_port()),
            "SCRIPTED_MODEL_PORT": str(free_port()),
            "SCRIPTED_MODEL_TOKEN_DELAY_MS": str(token_delay_ms),
            "METRICS_PORT_OFFSET": str(METRICS_OFFSET),
            "MULTI_AGENT_MODE": "true" if multi_agent else "false",
            "SUPERVISOR_GRACE": "5",
            **{f"{n}_ADDR": f"127.0.0.1:{free_port_pair(METRICS_OFFSET)}" for n in GRPC_SERVICES},
            **(extra_env or {}),
        }
        env.pop("OPENAI_BASE_URL", None)  # the scripted model, whose pace the bench sets
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.supervisor",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        mesh = BenchMesh(process, env, dsn)
        ready = asyncio.Event()
        assert process.stdout is not None and process.stderr is not None
        readers = [
            asyncio.create_task(_drain(process.stdout, mesh, ready)),
            asyncio.create_task(_drain(process.stderr, mesh, asyncio.Event())),
        ]
        try:
            up = asyncio.create_task(ready.wait())
            exited = asyncio.create_task(process.wait())
            # Whichever comes first: "is up", the supervisor exiting, or the deadline.
            await asyncio.wait({up, exited}, timeout=READY_SECONDS, return_when="FIRST_COMPLETED")
            up.cancel()
            exited.cancel()
            if not ready.is_set():
                tail = "".join(list(mesh.output)[-40:])
                raise RuntimeError(f"the mesh did not come up:\n{tail}")
            yield mesh
        finally:
            await _stop(process)
            for reader in readers:
                reader.cancel()


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 60)
    except TimeoutError:
        process.kill()
        await process.wait()
