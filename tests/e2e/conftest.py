"""The real processes: ``python -m services.supervisor`` on free ports."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator

import pytest

from services.common.ports import free_port, free_port_pair
from tests.conftest import ROOT
from tests.support.databases import clone_database, drop_database

INTERNAL_KEY = "e2e-internal-key"
METRICS_OFFSET = 7
SERVICES = ("orchestrator", "toolsearch", "hitl", "llmproxy")


def mesh_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "INTERNAL_API_KEY": INTERNAL_KEY,
        "GATEWAY_PORT": str(free_port()),
        "SCRIPTED_MODEL_PORT": str(free_port()),
        "SCRIPTED_MODEL_TOKEN_DELAY_MS": "1",
        "METRICS_PORT_OFFSET": str(METRICS_OFFSET),
        "SUPERVISOR_GRACE": "5",
        **{
            f"{name.upper()}_ADDR": f"127.0.0.1:{free_port_pair(METRICS_OFFSET)}"
            for name in SERVICES
        },
        **extra,
    }
    env.pop("OPENAI_BASE_URL", None)
    return env


class MeshProcess:
    """A supervisor-run mesh that can be stopped and started again on the same ports."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.output: list[str] = []
        self.process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    def addr(self, name: str) -> str:
        return self.env[f"{name.upper()}_ADDR"]

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.env['GATEWAY_PORT']}"

    @property
    def ws(self) -> str:
        return self.gateway.replace("http://", "ws://")

    @property
    def model(self) -> str:
        return f"http://127.0.0.1:{self.env['SCRIPTED_MODEL_PORT']}"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.supervisor",
            cwd=ROOT,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        ready = asyncio.Event()
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.process.stdout, ready)),
            asyncio.create_task(self._read(self.process.stderr, asyncio.Event())),
        ]
        try:
            await asyncio.wait_for(ready.wait(), 90)
        except TimeoutError:
            pytest.fail("the mesh did not come up:\n" + "".join(self.output[-60:]))

    async def _read(self, stream: asyncio.StreamReader, ready: asyncio.Event) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace")
            self.output.append(text)
            if "is up" in text:
                ready.set()

    async def stop(self) -> int:
        code = 0
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                code = await self.process.wait()
        for reader in self._readers:
            reader.cancel()
        return code

    def pids(self, module: str) -> list[int]:
        """Live pids running ``python -m module`` for this mesh (matched on its gateway port)."""
        marker = f"GATEWAY_PORT={self.env['GATEWAY_PORT']}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().split(b"\0")
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if module.encode() in cmdline and marker in environ:
                found.append(int(entry))
        return found

    def kill(self, module: str) -> None:
        """kill -9 every process of ``module`` in this mesh."""
        pids = self.pids(module)
        assert pids, f"{module} is not running"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
async def mesh_database(pg_template: str) -> AsyncIterator[str]:
    dsn = await clone_database(pg_template)
    yield dsn
    await drop_database(pg_template, dsn)


@pytest.fixture(scope="module")
async def real_mesh(mesh_database: str) -> AsyncIterator[MeshProcess]:
    mesh = MeshProcess(mesh_env(mesh_database))
    await mesh.start()
    yield mesh
    await mesh.stop()
