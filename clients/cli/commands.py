"""execute_command / run_command: a shell command in the workspace, with a timeout and a cap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from clients.cli.errors import ToolTimedOut

DEFAULT_TIMEOUT = 120.0
OUTPUT_CAP = 64 * 1024


def capped(data: bytes, cap: int = OUTPUT_CAP) -> tuple[str, bool]:
    """The output as text, keeping its head and tail when it passes ``cap`` bytes."""
    if len(data) <= cap:
        return data.decode("utf-8", "replace"), False
    half = cap // 2
    omitted = len(data) - 2 * half
    head = data[:half].decode("utf-8", "replace")
    tail = data[-half:].decode("utf-8", "replace")
    return f"{head}\n… {omitted} bytes omitted …\n{tail}", True


async def run(command: str, cwd: Path, seconds: float, cap: int = OUTPUT_CAP) -> dict[str, Any]:
    """Run ``command`` through the shell; its whole process group dies after ``seconds``."""
    process = await asyncio.create_subprocess_shell(
        command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(seconds):
            stdout, stderr = await process.communicate()
    except (TimeoutError, asyncio.CancelledError) as stopped:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        if isinstance(stopped, TimeoutError):
            raise ToolTimedOut(
                f"{command!r} ran longer than {seconds:g} s and was killed"
            ) from None
        raise
    out, out_cut = capped(stdout, cap)
    err, err_cut = capped(stderr, cap)
    return {
        "exit_code": process.returncode,
        "stdout": out,
        "stderr": err,
        "truncated": out_cut or err_cut,
    }
