"""The supervisor with small real child processes: restarts, giving up, shutdown, readiness."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.supervisor.plan import ChildSpec
from services.supervisor.readiness import Probe
from services.supervisor.supervisor import Supervisor

# Generous: these bound a hang, they are not performance assertions.
TIMEOUT = 30.0

SLEEPER = "import time\nwhile True: time.sleep(0.1)"

CRASHER = """
import pathlib, sys
with pathlib.Path(sys.argv[1]).open("a") as f:
    f.write("started\\n")
sys.exit(3)
"""

# Crashes on its first two starts, then stays up.
CRASH_TWICE = """
import pathlib, sys, time
counter = pathlib.Path(sys.argv[1])
with counter.open("a") as f:
    f.write("started\\n")
if len(counter.read_text().splitlines()) <= 2:
    sys.exit(3)
while True: time.sleep(0.1)
"""

PID_THEN_SLEEP = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
while True: time.sleep(0.1)
"""

# argv: log file, name, "exit" or "ignore", ready-marker file.
TERM_LOGGER = """
import pathlib, signal, sys, time
log, name, mode, marker = sys.argv[1:5]
def on_term(signum, frame):
    with open(log, "a") as f:
        f.write(f"{name} got TERM\\n")
    if mode == "exit":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
pathlib.Path(marker).touch()
while True: time.sleep(0.1)
"""


def child(name: str, code: str, *args: object, ready: Probe | None = None) -> ChildSpec:
    argv = [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]
    return ChildSpec(name=name, argv=argv, env=dict(os.environ), ready=ready)


def file_exists(path: Path) -> Probe:
    async def probe() -> bool:
        return await asyncio.to_thread(path.exists)

    return probe


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def until(condition: Callable[[], bool]) -> None:
    # Polling on purpose: the state lives in files written by other processes.
    async with asyncio.timeout(TIMEOUT):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_child_that_exits_is_restarted(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    sup = Supervisor([child("crasher", CRASHER, counter)], backoff=0.01)
    run = asyncio.create_task(sup.run())
    await until(lambda: len(lines(counter)) >= 3)
    assert sup.restarts["crasher"] >= 2
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0


async def test_a_crashing_child_is_restarted_for_ever_and_the_others_keep_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    counter, pid_file = tmp_path / "counter", tmp_path / "pid"
    sleeper = child("sleeper", PID_THEN_SLEEP, pid_file, ready=file_exists(pid_file))
    crasher = child("crasher", CRASHER, counter)
    sup = Supervisor([sleeper, crasher], backoff=0.001, backoff_max=0.02)
    caplog.set_level(logging.WARNING)
    run = asyncio.create_task(sup.run())

    await until(lambda: len(lines(counter)) >= 12)  # far past any "give up" threshold
    assert not run.done()
    assert "crasher" in sup.down and "sleeper" not in sup.down
    assert sup.down["crasher"] <= time.time()
    assert pid_alive(int(pid_file.read_text()))
    assert sup.returncode("sleeper") is None
    down = [r for r in caplog.records if r.getMessage() == "child down; restarting"]
    assert down[-1].fields["child"] == "crasher"  # type: ignore[attr-defined]
    assert down[-1].fields["down_since"]  # type: ignore[attr-defined]
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0
    assert not pid_alive(int(pid_file.read_text()))


async def test_a_child_back_from_crashes_is_down_until_it_stays_up(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    sup = Supervisor(
        [child("flaky", CRASH_TWICE, counter)], backoff=0.001, backoff_max=0.01, stable_after=0.5
    )
    run = asyncio.create_task(sup.run())
    await until(lambda: len(lines(counter)) >= 3)  # the third start stays up
    assert "flaky" in sup.down  # not yet up as long as a healthy child
    first_down = sup.down["flaky"]
    await until(lambda: "flaky" not in sup.down)
    assert first_down <= time.time()
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0


def test_the_back_off_doubles_up_to_its_cap() -> None:
    sup = Supervisor([], backoff=0.5, backoff_max=30.0)
    assert [sup.backoff(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert sup.backoff(10_000) == 30.0


async def test_shutdown_terms_in_reverse_order_and_kills_a_stubborn_child(tmp_path: Path) -> None:
    log = tmp_path / "terms"
    specs = [
        child(
            name, TERM_LOGGER, log, name, mode, tmp_path / name, ready=file_exists(tmp_path / name)
        )
        for name, mode in [("first", "exit"), ("stubborn", "ignore"), ("last", "exit")]
    ]
    sup = Supervisor(specs, grace=0.5, poll_interval=0.05)
    run = asyncio.create_task(sup.run())
    await asyncio.wait_for(sup.ready.wait(), TIMEOUT)

    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0

    assert lines(log) == ["last got TERM", "stubborn got TERM", "first got TERM"]
    assert sup.returncode("stubborn") == -signal.SIGKILL
    assert sup.returncode("first") == 0
    assert sup.returncode("last") == 0


async def test_a_second_stop_request_kills_at_once(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    args = (tmp_path / "log", "stubborn", "ignore", marker)
    stubborn = child("stubborn", TERM_LOGGER, *args, ready=file_exists(marker))
    sup = Supervisor([stubborn], grace=3600.0, poll_interval=0.05)
    run = asyncio.create_task(sup.run())
    await asyncio.wait_for(sup.ready.wait(), TIMEOUT)

    sup.request_stop()
    await until(lambda: lines(tmp_path / "log") == ["stubborn got TERM"])
    sup.request_stop()

    assert await asyncio.wait_for(run, TIMEOUT) == 0
    assert sup.returncode("stubborn") == -signal.SIGKILL


async def test_the_banner_is_written_once_every_probe_answers() -> None:
    calls = 0

    async def turns_ready() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    written: list[str] = []
    specs = [child("slow", SLEEPER, ready=turns_ready), child("instant", SLEEPER)]
    sup = Supervisor(specs, banner="CodeLab is up\n", write=written.append, poll_interval=0.05)
    run = asyncio.create_task(sup.run())
    await asyncio.wait_for(sup.ready.wait(), TIMEOUT)

    assert written == ["CodeLab is up\n"]
    assert calls >= 3
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0


async def test_a_readiness_timeout_names_the_child_and_keeps_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def never() -> bool:
        return False

    async def broken() -> bool:
        raise ConnectionError("probe blew up")

    written: list[str] = []
    specs = [child("never", SLEEPER, ready=never), child("broken", SLEEPER, ready=broken)]
    sup = Supervisor(specs, ready_timeout=0, banner="up\n", write=written.append)
    caplog.set_level(logging.WARNING)
    run = asyncio.create_task(sup.run())

    def warned() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "not ready" in r.getMessage()]

    await until(lambda: bool(warned()))
    assert warned()[0].fields["not_ready"] == ["broken", "never"]  # type: ignore[attr-defined]
    assert not run.done() and written == []
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0


async def test_a_command_that_cannot_start_is_retried_without_giving_up(tmp_path: Path) -> None:
    missing = ChildSpec("ghost", [str(tmp_path / "no-such-binary")], dict(os.environ))
    sup = Supervisor([missing], backoff=0.001, backoff_max=0.01)
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.restarts["ghost"] >= 5)
    assert not run.done() and "ghost" in sup.down
    sup.request_stop()
    assert await asyncio.wait_for(run, TIMEOUT) == 0
