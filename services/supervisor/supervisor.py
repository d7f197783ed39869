"""Run the whole mesh in the foreground: ``python -m services.supervisor [--only a,b]``.

Children run in their own sessions (a terminal Ctrl-C reaches only the supervisor)
and inherit stdout/stderr. One that exits on its own is restarted, forever, with
exponential back-off (0.5 s doubling to SUPERVISOR_BACKOFF_MAX, 30 s by default; a child
that stayed up a minute starts again from 0.5 s); the other children are never touched.
Which child is down and since when is in ``Supervisor.down`` and in every restart log
line. SIGINT/SIGTERM stops children in reverse start order (SIGTERM, SIGKILL after the
grace), then the embedded Postgres, exit 0; a second Ctrl-C kills everything at once.
Bad settings exit 2.

Supervisor-only env knobs: SUPERVISOR_GRACE (default 10 s per child after SIGTERM),
SUPERVISOR_READY_TIMEOUT (90 s until "not ready" is logged), SUPERVISOR_BACKOFF_MAX
(30 s), SCRIPTED_MODEL_PORT (8090; the built-in model, started only when
OPENAI_BASE_URL is unset). DATABASE_URL unset starts the embedded Postgres under
``<CODELAB_DATA_DIR>/postgres``; INTERNAL_API_KEY unset is generated per run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from services.common.embedded_pg import EmbeddedPostgres, start_embedded
from services.common.errors import SettingsError
from services.common.logs import configure_logging
from services.common.settings import Settings
from services.supervisor.plan import (
    ChildSpec,
    SupervisorKnobs,
    build_plan,
    needs_embedded_postgres,
    render_banner,
    select_children,
)
from services.supervisor.readiness import wait_until_ready

log = logging.getLogger("services.supervisor")

ROOT = Path(__file__).resolve().parents[2]  # the parent of services/: the children's cwd


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _log(level: int, msg: str, **fields: object) -> None:
    log.log(level, msg, extra={"fields": fields})


class Supervisor:
    """Starts children in order, restarts crashed ones for ever, stops them in reverse order.

    ``run()`` returns 0 after a requested stop. ``ready`` is set once every probe answered.
    """

    def __init__(
        self,
        children: Sequence[ChildSpec],
        *,
        grace: float = 10.0,
        ready_timeout: float = 90.0,
        stable_after: float = 60.0,
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        banner: str | None = None,
        write: Callable[[str], object] = _stdout,
        cwd: Path | None = None,
        poll_interval: float = 0.25,
    ) -> None:
        names = [child.name for child in children]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique, got {names}")
        self._children = list(children)
        self._grace = grace
        self._ready_timeout = ready_timeout
        self._stable_after = stable_after
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._banner = banner
        self._write = write
        self._cwd = cwd
        self._poll = poll_interval
        self.restarts: dict[str, int] = dict.fromkeys(names, 0)
        """Restarts so far per child (never reset)."""
        self.down: dict[str, float] = {}
        """Children not running now -> since when (epoch seconds)."""
        self.ready = asyncio.Event()
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._stop = asyncio.Event()
        self._stopping = False
        self._force = False
        self._exit_code = 0

    def pid(self, name: str) -> int | None:
        """The pid of the child's current process, if it was started."""
        proc = self._procs.get(name)
        return proc.pid if proc is not None else None

    def returncode(self, name: str) -> int | None:
        """The exit code of the child's current process; None while it runs (or never ran)."""
        proc = self._procs.get(name)
        return proc.returncode if proc is not None else None

    def request_stop(self) -> None:
        """First call: graceful stop in reverse order. Second call: kill everything now."""
        if not self._stop.is_set():
            _log(logging.INFO, "stopping all children")
            self._stop.set()
        elif not self._force:
            _log(logging.WARNING, "second stop request: killing all children")
            self._force = True
            for proc in self._procs.values():
                self._signal(proc, signal.SIGKILL)

    def install_signal_handlers(self) -> None:
        """Route SIGINT/SIGTERM of the running loop to ``request_stop``."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop)

    async def run(self) -> int:
        """Start everything, wait for a stop request or a fatal crash, stop everything."""
        watchers: list[asyncio.Task[None]] = []
        ready_task: asyncio.Task[None] | None = None
        try:
            for child in self._children:
                if self._stop.is_set():
                    break
                proc = await self._spawn(child)
                watchers.append(asyncio.create_task(self._watch(child, proc)))
            ready_task = asyncio.create_task(self._wait_ready())
            await self._stop.wait()
        finally:
            if ready_task is not None:
                ready_task.cancel()
            await self._shutdown(watchers)
        return self._exit_code

    async def _spawn(self, child: ChildSpec) -> asyncio.subprocess.Process | None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *child.argv, env=dict(child.env), cwd=self._cwd, start_new_session=True
            )
        except OSError as exc:
            # Counted as a crash by the watcher: retried with back-off like any other.
            _log(logging.ERROR, "child failed to start", child=child.name, error=str(exc))
            return None
        self._procs[child.name] = proc
        _log(logging.INFO, "child started", child=child.name, pid=proc.pid)
        return proc

    def backoff(self, failures: int) -> float:
        """Seconds before restart number ``failures`` (1, 2, ...) in a row."""
        return float(min(self._backoff * 2 ** min(failures - 1, 62), self._backoff_max))

    def _up_if_running(self, name: str, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            self.down.pop(name, None)

    async def _watch(self, child: ChildSpec, proc: asyncio.subprocess.Process | None) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            started = loop.time()
            code = await proc.wait() if proc is not None else None
            if self._stopping:
                return
            # A child that stayed up long enough was healthy: its back-off starts over.
            failures = 1 if loop.time() - started >= self._stable_after else failures + 1
            since = self.down.setdefault(child.name, time.time())
            delay = self.backoff(failures)
            self.restarts[child.name] += 1
            _log(
                logging.WARNING,
                "child down; restarting",
                child=child.name,
                exit_code=code,
                down_since=dt.datetime.fromtimestamp(since, dt.UTC).isoformat(timespec="seconds"),
                restarts=self.restarts[child.name],
                delay_s=delay,
            )
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
                return  # a stop arrived during the backoff
            except TimeoutError:
                pass
            proc = await self._spawn(child)
            if proc is not None:
                # Up again, but a crash loop is still down: it counts as up once it has
                # stayed up as long as a healthy child (when its back-off starts over).
                loop.call_later(self._stable_after, self._up_if_running, child.name, proc)
            if self._stopping and proc is not None:
                # The stop began while we were spawning: shutdown may already have
                # passed this child, so this watcher stops what it just started.
                await self._stop_proc(child.name, proc)
                return

    async def _wait_ready(self) -> None:
        probes = {child.name: child.ready for child in self._children}
        await wait_until_ready(probes, warn_after=self._ready_timeout, poll=self._poll)
        if self._banner:
            self._write(self._banner)
        self.ready.set()

    async def _shutdown(self, watchers: list[asyncio.Task[None]]) -> None:
        self._stopping = True
        self._stop.set()  # wakes watchers sleeping in a backoff
        for child in reversed(self._children):
            proc = self._procs.get(child.name)
            if proc is not None:
                await self._stop_proc(child.name, proc)
        await asyncio.gather(*watchers)
        _log(logging.INFO, "all children stopped", exit_code=self._exit_code)

    async def _stop_proc(self, name: str, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None:
            return
        self._signal(proc, signal.SIGKILL if self._force else signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self._grace)
        except TimeoutError:
            _log(logging.WARNING, "child ignored SIGTERM; killing", child=name, grace_s=self._grace)
            self._signal(proc, signal.SIGKILL)
            await proc.wait()
        _log(logging.INFO, "child stopped", child=name, exit_code=proc.returncode)

    @staticmethod
    def _signal(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
        if proc.returncode is not None:
            return
        # Already gone is fine (PermissionError: a reaped group on some platforms).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # The whole session/group: grandchildren (workers, reloaders) go too.
            os.killpg(proc.pid, sig)


async def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m services.supervisor", description="Run the CodeLab mesh."
    )
    parser.add_argument("--only", metavar="NAME,NAME", help="start just these children")
    args = parser.parse_args(argv)
    environ = dict(os.environ if env is None else env)
    try:
        settings = Settings.from_env(environ)
        knobs = SupervisorKnobs.from_env(environ)
        names = select_children(args.only)
    except SettingsError as exc:
        print(f"supervisor: {exc}", file=sys.stderr)
        return 2
    configure_logging("supervisor", settings.log_level)

    # Signals arriving while Postgres boots (it cannot be interrupted) are remembered.
    loop = asyncio.get_running_loop()
    early_stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, early_stop.set)
    embedded: EmbeddedPostgres | None = None
    try:
        if needs_embedded_postgres(environ, names):
            folder = settings.data_dir / "postgres"
            try:
                embedded = await asyncio.to_thread(start_embedded, folder)
            except Exception as exc:
                _log(logging.ERROR, "embedded postgres failed to start", error=repr(exc))
                print(f"supervisor: embedded Postgres failed to start: {exc}", file=sys.stderr)
                return 1
        if early_stop.is_set():
            return 0
        plan = build_plan(environ, embedded_dsn=embedded.dsn if embedded else None, only=names)
        supervisor = Supervisor(
            plan.children,
            grace=knobs.grace,
            ready_timeout=knobs.ready_timeout,
            backoff_max=knobs.backoff_max,
            banner=render_banner(plan),
            cwd=ROOT,
        )
        supervisor.install_signal_handlers()
        return await supervisor.run()
    finally:
        if embedded is not None:
            embedded.stop()  # last: every child that used it has exited by now
            _log(logging.INFO, "embedded postgres stopped")
