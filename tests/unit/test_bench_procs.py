"""The bench's process accounting: Postgres backends opened after the mesh was listed count."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time

from bench.procs import POSTGRES, Load, cpu_delta, current, quiet, resident, snapshot
from bench.sessions import PeakMemory

BURN = (
    "import time\nend = time.process_time() + 0.3\n"
    "while time.process_time() < end: pass\ntime.sleep(30)\n"
)
PARENT = (
    "import subprocess, sys\n"
    "sys.stdin.readline()\n"  # the child starts only once the parent has been listed
    f"child = subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
    "sys.stdin.readline()\n"
    "child.kill()\n"
)


def test_a_backend_started_later_is_listed_and_its_cpu_counted() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, text=True)
    assert parent.stdin is not None
    try:
        listed = {POSTGRES: [parent.pid], "other": [os.getpid()]}
        before = snapshot(listed)
        assert current(listed)[POSTGRES] == [parent.pid]
        parent.stdin.write("go\n")
        parent.stdin.flush()
        deadline = time.monotonic() + 10
        while len(current(listed)[POSTGRES]) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(current(listed)[POSTGRES]) == 2 and listed[POSTGRES] == [parent.pid]
        spent = 0.0
        while spent < 0.25 and time.monotonic() < deadline:  # the child burns 0.3 s, then waits
            time.sleep(0.05)
            spent = cpu_delta(before, snapshot(listed))[POSTGRES]
        assert spent >= 0.25
    finally:
        parent.stdin.write("done\n")
        parent.stdin.close()
        parent.wait(10)


def test_the_memory_sampler_reads_each_service_and_the_client() -> None:
    listed = {"other": [os.getpid()]}
    rss = resident(listed)
    assert set(rss) == {"other", "bench client"}
    assert rss["other"] > 0 and rss["bench client"] > 0


async def test_a_level_s_own_sample_keeps_its_high_between_the_timed_ones() -> None:
    memory = PeakMemory({"other": [os.getpid()]}, every=3600)  # the timer never fires here
    before = memory.peak["other"]
    async with memory:
        ballast = bytearray(64 * 1024 * 1024)
        ballast[::4096] = b"x" * len(range(0, len(ballast), 4096))  # every page resident
        memory.sample()
        del ballast
    assert memory.peak["other"] - before >= 60 * 1024


async def test_the_bench_waits_for_busy_processes_to_go_quiet() -> None:
    busy = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    idle = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(30)")
    try:
        assert not await quiet({"busy": [busy.pid]}, window=0.2, most=0.5)
        assert await quiet({"idle": [idle.pid]}, window=0.2, most=5)
    finally:
        for process in (busy, idle):
            process.kill()
            await process.wait()


def test_a_load_splits_the_mesh_from_the_model_and_bench_and_says_how_full_the_cores_were() -> None:
    cpu = {"orchestrator": 1.5, "gateway": 0.75, "postgres": 1.0, "scripted_model": 0.5}
    load = Load({**cpu, "bench client": 0.25}, wall=2.0, cores=2)
    assert load.mesh == 3.25
    assert load.busy == 100.0  # 4.0 CPU s in 2 s on 2 cores
    assert load.split() == "mesh 3.25 · scripted_model 0.50 · bench client 0.25"
    # Per turn (1,000 turns, in ms), the mesh's processes largest first.
    assert load.split(1 / 1000, 0, processes=True) == (
        "mesh 3250 (orchestrator 1500 · postgres 1000 · gateway 750)"
        " · scripted_model 500 · bench client 250"
    )
    assert load.describe() == "the 2 cores 100 % busy over 2.00 s"
    assert Load(cpu, wall=4.0, cores=2).busy == 46.875
    assert math.isnan(Load(cpu, wall=0.0).busy)
    assert load.as_data() == {"cpu_s": {**cpu, "bench client": 0.25}, "wall_s": 2.0, "cores": 2}
