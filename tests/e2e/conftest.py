"""The real processes: ``python -m services.supervisor`` on free ports."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from services.common.asgi import bind_free_port
from tests.conftest import ROOT
from tests.support.databases import clone_database, drop_database

INTERNAL_KEY = "e2e-internal-key"
METRICS_OFFSET = 7


def free_port_pair(offset: int) -> int:
    """A port p with p and p + offset both free right now."""
    for _ in range(50):
        first = bind_free_port()
        port = int(first.getsockname()[1])
        try:
            second = bind_free_port(port=port + offset)
        except OSError:
            first.close()
            continue
        first.close()
        second.close()
        return port
    raise RuntimeError("no free port pair")


@dataclass
class RunningMesh:
    """Addresses of a supervisor-run mesh."""

    process: asyncio.subprocess.Process
    env: dict[str, str]
    output: list[str]

    def addr(self, name: str) -> str:
        return self.env[f"{name.upper()}_ADDR"]

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.env['GATEWAY_PORT']}"

    @property
    def model(self) -> str:
        return f"http://127.0.0.1:{self.env['SCRIPTED_MODEL_PORT']}"


async def _read(stream: asyncio.StreamReader, sink: list[str], ready: asyncio.Event) -> None:
    while line := await stream.readline():
        text = line.decode(errors="replace")
        sink.append(text)
        if "is up" in text:
            ready.set()


@pytest.fixture(scope="module")
async def real_mesh(pg_template: str) -> AsyncIterator[RunningMesh]:
    dsn = await clone_database(pg_template)
    ports = {
        name: free_port_pair(METRICS_OFFSET)
        for name in ("ORCHESTRATOR", "TOOLSEARCH", "HITL", "LLMPROXY")
    }
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "INTERNAL_API_KEY": INTERNAL_KEY,
        "GATEWAY_PORT": str(bind_free_port().getsockname()[1]),
        "SCRIPTED_MODEL_PORT": str(bind_free_port().getsockname()[1]),
        "SCRIPTED_MODEL_TOKEN_DELAY_MS": "1",
        "METRICS_PORT_OFFSET": str(METRICS_OFFSET),
        "SUPERVISOR_GRACE": "5",
        **{f"{name}_ADDR": f"127.0.0.1:{port}" for name, port in ports.items()},
    }
    env.pop("OPENAI_BASE_URL", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.supervisor",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    output: list[str] = []
    ready = asyncio.Event()
    assert process.stdout is not None and process.stderr is not None
    readers = [
        asyncio.create_task(_read(process.stdout, output, ready)),
        asyncio.create_task(_read(process.stderr, output, asyncio.Event())),
    ]
    try:
        try:
            await asyncio.wait_for(ready.wait(), 90)
        except TimeoutError:
            pytest.fail("the mesh did not come up:\n" + "".join(output[-60:]))
        yield RunningMesh(process, env, output)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        for reader in readers:
            reader.cancel()
        await drop_database(pg_template, dsn)
