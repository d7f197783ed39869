"""The transport every service process runs: the package picks it, gRPC knows it, the
operator can override it; gRPC's fork handlers stay off in a serving process that forks.
Each case starts a fresh interpreter: gRPC reads the setting once."""

from __future__ import annotations

import os
import subprocess
import sys

import services

START = (
    "import services, os, asyncio, grpc\n"
    "async def main():\n"
    "    server = grpc.aio.server()\n"
    "    server.add_insecure_port('127.0.0.1:0')\n"
    "    await server.start()\n"
    "    channel = grpc.aio.insecure_channel('127.0.0.1:1')\n"
    "    await channel.close()\n"
    "    await server.stop(None)\n"
    "asyncio.run(main())\n"
    "print(os.environ['GRPC_EXPERIMENTS'])\n"
)


def start(**env: str) -> subprocess.CompletedProcess[str]:
    """A process that imports the package, then starts a gRPC server and a channel."""
    clean = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    return subprocess.run(
        [sys.executable, "-c", START],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_the_package_sets_the_transport_and_grpc_knows_every_experiment_named() -> None:
    done = start()
    assert done.stdout.strip() == services.GRPC_TRANSPORT
    assert "Unknown experiment" not in done.stderr


def test_an_experiment_grpc_does_not_know_is_reported_so_the_check_above_can_fail() -> None:
    done = start(GRPC_EXPERIMENTS="-no_such_experiment")
    assert done.stdout.strip() == "-no_such_experiment"
    assert "Unknown experiment: no_such_experiment" in done.stderr


def test_an_operators_setting_wins_even_empty() -> None:
    assert start(GRPC_EXPERIMENTS="").stdout.strip() == ""


FORK = (
    "import services, os, asyncio, grpc, subprocess\n"
    "async def main():\n"
    "    server = grpc.aio.server()\n"
    "    server.add_insecure_port('127.0.0.1:0')\n"
    "    await server.start()\n"
    "    subprocess.run(['/bin/true'], user=os.getuid(), check=True)\n"
    "    await server.stop(None)\n"
    "asyncio.run(main())\n"
)


def fork_while_serving(**env: str) -> subprocess.CompletedProcess[str]:
    """A serving process that starts a child as the embedded Postgres does (``user=`` makes
    Python fork, not vfork, so gRPC's fork handlers run when they are on)."""
    clean = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    return subprocess.run(
        [sys.executable, "-c", FORK],
        env={**clean, "GRPC_VERBOSITY": "info", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_the_package_turns_grpcs_fork_handlers_off() -> None:
    assert "fork() handlers" not in fork_while_serving().stderr


def test_grpcs_fork_handlers_when_on_are_seen_so_the_check_above_can_fail() -> None:
    assert "fork() handlers" in fork_while_serving(GRPC_ENABLE_FORK_SUPPORT="true").stderr
