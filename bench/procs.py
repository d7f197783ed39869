"""What the mesh's processes cost, read straight from /proc (Linux only, no psutil).

The supervisor's children are found through ``/proc/<pid>/task/*/children`` and named
after their ``python -m services.<name>`` module. Postgres is not a child of the
supervisor (the bench starts it), so its postmaster is read from ``postmaster.pid``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POSTGRES = "postgres"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's list: a child may belong to any thread)."""
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


def descendants(pid: int) -> list[int]:
    """``pid`` and everything below it."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children(current)
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def service_name(pid: int) -> str | None:
    """``orchestrator`` for ``python -m services.orchestrator``; None for anything else."""
    argv = _cmdline(pid)
    for flag, module in itertools.pairwise(argv):
        if flag == "-m" and module.startswith("services."):
            return module.removeprefix("services.")
    return None


def mesh_processes(supervisor_pid: int, pgdata: Path | None) -> dict[str, list[int]]:
    """Service name -> pids (the child and its own descendants); plus ``postgres``."""
    found: dict[str, list[int]] = {}
    for child in children(supervisor_pid):
        name = service_name(child)
        if name is not None:
            found.setdefault(name, []).extend(descendants(child))
    if pgdata is not None:  # the postmaster first: its backends are listed at each snapshot
        try:
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            postmaster = 0
        if postmaster:
            found[POSTGRES] = descendants(postmaster)
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` so far (0 when it is gone)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    # The command name may contain spaces; the fields after its closing paren do not.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _status_kib(pid: int, key: str, path: str = "status") -> int:
    try:
        text = (PROC / str(pid) / path).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def memory_kib(name: str, pids: Iterable[int]) -> int:
    """Resident memory of a service's processes in KiB.

    VmRSS for the Python services. Postgres backends share their buffers, so summing
    their RSS would count shared memory once per backend: PSS (each shared page split
    between its users) adds up honestly.
    """
    if name == POSTGRES:
        return sum(_status_kib(pid, "Pss", "smaps_rollup") for pid in pids)
    return sum(_status_kib(pid, "VmRSS") for pid in pids)


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds and resident KiB per service at one moment."""

    cpu: Mapping[str, float]
    rss_kib: Mapping[str, int]


def current(processes: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """``processes`` with Postgres' backends as they are now: a pool opens connections
    as load grows, and a backend started after the mesh was listed works for it too."""
    found = dict(processes)
    if found.get(POSTGRES):
        found[POSTGRES] = descendants(found[POSTGRES][0])
    return found


async def quiet(
    processes: Mapping[str, list[int]],
    *,
    share: float = 0.1,
    window: float = 0.5,
    most: float = 20.0,
) -> bool:
    """Wait until ``processes`` (with Postgres' backends as they are now) use less than
    ``share`` of one CPU over ``window`` seconds, for at most ``most`` seconds; False when
    they never did. A mesh just started still embeds its tool catalog (toolsearch, both
    cores, a second or two): latencies taken beside that measure the start, not the path."""
    deadline = time.monotonic() + most
    while True:
        pids = [pid for group in current(processes).values() for pid in group]
        before = sum(cpu_seconds(pid) for pid in pids)
        await asyncio.sleep(window)
        if sum(cpu_seconds(pid) for pid in pids) - before < share * window:
            return True
        if time.monotonic() >= deadline:
            return False


def _resident_of(listed: Mapping[str, list[int]]) -> dict[str, int]:
    rss = {name: memory_kib(name, pids) for name, pids in listed.items()}
    rss["bench client"] = _status_kib(os.getpid(), "VmRSS")
    return rss


def resident(processes: Mapping[str, list[int]]) -> dict[str, int]:
    """Every service's resident KiB now (the bench client's own included), without the
    CPU times: what a memory sampler reads while the mesh is under load."""
    return _resident_of(current(processes))


def snapshot(processes: Mapping[str, list[int]]) -> Snapshot:
    """Read every service's CPU time and memory now (the bench client's own included)."""
    processes = current(processes)
    cpu = {name: sum(cpu_seconds(p) for p in pids) for name, pids in processes.items()}
    cpu["bench client"] = sum(os.times()[:2])
    return Snapshot(cpu, _resident_of(processes))


def cpu_delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds spent per service between two snapshots."""
    return {name: after.cpu[name] - before.cpu.get(name, 0.0) for name in after.cpu}


OUTSIDE = ("scripted_model", "bench client")
"""Not the runtime: the model it is fed by, and the bench itself (they share the box)."""


@dataclass(frozen=True)
class Load:
    """What a stretch of the bench asked of the box: CPU seconds per process over ``wall``
    seconds of wall clock, on ``cores`` cores. A level that keeps the cores busy to the
    end has no room left for a slow minute of a shared VM: the share says which runs met
    or missed a figure for that reason (decisions.md, "How full the box was")."""

    cpu: Mapping[str, float]
    wall: float
    cores: int = os.cpu_count() or 1

    @property
    def mesh(self) -> float:
        """CPU seconds of the runtime's processes (Postgres included)."""
        return sum(cpu for name, cpu in self.cpu.items() if name not in OUTSIDE)

    @property
    def busy(self) -> float:
        """Percent of the cores' time the listed processes used (NaN for no time)."""
        if self.wall <= 0:
            return float("nan")
        return sum(self.cpu.values()) / (self.wall * self.cores) * 100

    def split(self, per: float = 1.0, digits: int = 2, processes: bool = False) -> str:
        """The mesh's CPU, then each outside process's, each divided by ``per``: "mesh 3.52
        · scripted_model 0.61 · bench client 0.44"; ``processes``: the mesh's own by process
        in brackets after its total, the largest first."""
        mesh = f"mesh {self.mesh / per:.{digits}f}"
        if processes:
            inside = sorted(
                ((name, cpu) for name, cpu in self.cpu.items() if name not in OUTSIDE),
                key=lambda item: -item[1],
            )
            mesh += f" ({' · '.join(f'{name} {cpu / per:.{digits}f}' for name, cpu in inside)})"
        outside = "".join(
            f" · {name} {self.cpu[name] / per:.{digits}f}" for name in OUTSIDE if name in self.cpu
        )
        return mesh + outside

    def describe(self) -> str:
        """How full the cores were: "the 2 cores 96 % busy over 2.35 s"."""
        return f"the {self.cores} cores {self.busy:.0f} % busy over {self.wall:.2f} s"

    def as_data(self) -> dict[str, object]:
        return {"cpu_s": dict(self.cpu), "wall_s": self.wall, "cores": self.cores}


def busy_list(shares: Sequence[float | None]) -> str | None:
    """Several passes' or rounds' busy shares for a table: "91, 100, 95 %"; None when any
    was not measured."""
    known = [share for share in shares if share is not None]
    if len(known) != len(shares):
        return None
    return f"{', '.join(f'{share:.0f}' for share in known)} %"


LOOP_STEPS = 1_000_000


def loop_ms(steps: int = LOOP_STEPS) -> float:
    """Milliseconds this process takes for a fixed pure-Python loop, now: the box's speed
    at that moment. A shared VM's speed moves by the hour (the same loop took 0.43 and 0.77 s
    for 5M steps twenty minutes apart), and every figure that is CPU moves with it; the
    bench takes one before each section so a run that sped up or slowed down says so."""
    started = time.perf_counter()
    total = 0
    for step in range(steps):
        total += step
    return round((time.perf_counter() - started) * 1000, 1)
