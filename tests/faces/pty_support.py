"""codelab in a pseudo-terminal: the real prompt_toolkit and rich, typed at like a person."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import struct
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.faces.cli_support import CLI, cli_env

ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][A-Z0-9]|[=>78])")
WAIT = 60.0


class Terminal:
    """The screen's text so far (escape codes removed) and a keyboard."""

    def __init__(self, master: int, process: asyncio.subprocess.Process) -> None:
        self.master = master
        self.process = process
        self.raw = b""
        self._more = asyncio.Event()
        self._seen = 0

    @property
    def text(self) -> str:
        return ESCAPES.sub("", self.raw.decode("utf-8", "replace")).replace("\r", "")

    def read(self) -> None:
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the child closed the terminal
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.master)
        self.raw += chunk
        self._more.set()

    async def expect(self, wanted: str) -> str:
        """Wait until ``wanted`` appears after what the last expect matched; the text before."""
        try:
            async with asyncio.timeout(WAIT):
                while (found := self.text.find(wanted, self._seen)) < 0:
                    self._more.clear()
                    await self._more.wait()
        except TimeoutError:
            raise AssertionError(f"no {wanted!r} on the screen:\n{self.text}") from None
        before = self.text[self._seen : found]
        self._seen = found + len(wanted)
        return before

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())


@asynccontextmanager
async def codelab_in_a_pty(*args: str, cwd: Path) -> AsyncIterator[Terminal]:
    """``codelab ARGS`` started in ``cwd`` on a 120x40 terminal; killed if still running."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = cli_env(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", COLUMNS="120", LINES="40")
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    terminal = Terminal(master, process)
    asyncio.get_running_loop().add_reader(master, terminal.read)
    try:
        yield terminal
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        asyncio.get_running_loop().remove_reader(master)
        os.close(master)
