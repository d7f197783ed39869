"""codelab's three modes: the interactive IDE, ``-p`` for scripts, ``sessions``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from prompt_toolkit import PromptSession
from rich.table import Table

from clients.cli.connection import Connection, Gateway
from clients.cli.driver import Driver, exit_code
from clients.cli.errors import CliError, Interrupted
from clients.cli.options import Options
from clients.cli.person import Nobody, Person
from clients.cli.terminal import TerminalPerson
from clients.cli.tools import Toolbox
from clients.cli.view import JsonView, RichView, View
from clients.cli.workspace import Workspace


def new_session_id() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def build_driver(options: Options, session_id: str, person: Person, view: View) -> Driver:
    workspace = Workspace(options.workspace)
    toolbox = Toolbox(workspace, person, command_timeout=options.command_timeout)
    connection = Connection(options.url, session_id, token=options.token)
    return Driver(connection, toolbox, person, view, workspace)


@contextlib.contextmanager
def on_interrupt(handler: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C calls ``handler`` while the block runs (the turn is cancelled, not the program)."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, handler)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def follow_interruptibly(driver: Driver, turn: Callable[[], Any]) -> str:
    """Run one turn; Ctrl-C cancels it and a second one ends it at once with ``quit``.

    Ctrl-C arrives as SIGINT, or, at one of codelab's questions (prompt_toolkit reads it as a
    key), as Interrupted out of the turn: the turn is then cancelled and followed to its end.
    """
    task = asyncio.ensure_future(turn())

    def interrupted() -> None:
        if driver.interrupt():
            task.cancel()

    with on_interrupt(interrupted):
        while True:
            try:
                return str(await task)
            except asyncio.CancelledError:
                return "quit"
            except Interrupted:
                if driver.interrupt():
                    return "quit"
                task = asyncio.ensure_future(driver.follow())


async def ask_once(options: Options, prompt: str) -> int:
    """``codelab -p``: one turn, no person; returns the process status."""
    view: View = JsonView() if options.json else RichView()
    driver = build_driver(options, options.session or new_session_id(), Nobody(), view)
    await driver.connection.open()
    try:
        status = await follow_interruptibly(
            driver, lambda: driver.say(prompt, agent_type=options.agent)
        )
    finally:
        await driver.connection.close()
    if not options.json:
        view.note(f"session {driver.connection.session_id}: {status}")
    return 130 if status == "quit" else exit_code(status)


async def show_history(gateway: Gateway, session_id: str, view: RichView, last: int = 10) -> None:
    """The end of a resumed session's conversation, compactly."""
    messages = [m for m in await gateway.history(session_id) if m.get("content")]
    for message in messages[-last:]:
        role = message.get("role")
        style = "bold" if role == "user" else "dim" if role == "tool" else ""
        view.print(f"{role}: {message['content'][:400]}", style=style)


async def interactive(options: Options) -> int:
    """The IDE: a prompt, turns followed live, tools run here, approvals asked."""
    view = RichView()
    prompts: PromptSession[str] = PromptSession()
    workspace = Workspace(options.workspace)
    person = TerminalPerson(view, workspace, prompts)
    session_id = options.session or new_session_id()
    driver = build_driver(options, session_id, person, view)
    gateway = Gateway(options.url, token=options.token)
    try:
        if options.session:
            await show_history(gateway, session_id, view)
        await driver.connection.open()
        view.note(f"session {session_id} in {workspace.root} — Ctrl-C cancels, Ctrl-D quits")
        await converse(driver, prompts, view, options, gateway)
    finally:
        await driver.connection.close()
        await gateway.close()
    view.note(f"resume with: codelab --session {session_id}")
    return 0


async def converse(
    driver: Driver,
    prompts: PromptSession[str],
    view: RichView,
    options: Options,
    gateway: Gateway,
) -> None:
    """Turns until ``/quit``, Ctrl-D or Ctrl-C at the prompt, or a second Ctrl-C in a turn."""
    status = "idle"
    if options.session:
        status = await follow_interruptibly(driver, functools.partial(driver.resume, gateway))
    while status != "quit":
        try:
            text = (await prompts.prompt_async(f"{view.agent} › ")).strip()
        except (EOFError, KeyboardInterrupt):
            return
        if text in ("/quit", "/exit"):
            return
        if text:
            turn = functools.partial(driver.say, text, agent_type=options.agent)
            status = await follow_interruptibly(driver, turn)


async def list_sessions(options: Options) -> int:
    gateway = Gateway(options.url, token=options.token)
    try:
        sessions = await gateway.sessions()
    finally:
        await gateway.close()
    if options.json:
        for item in sessions:
            print(json.dumps(item, ensure_ascii=False))
        return 0
    table = Table("session", "title", "messages", "last activity")
    for item in sessions:
        table.add_row(
            str(item.get("session_id")),
            str(item.get("title") or ""),
            str(item.get("message_count", 0)),
            str(item.get("last_activity") or ""),
        )
    RichView().console.print(table)
    return 0


async def run(options: Options) -> int:
    """Dispatch on the mode; a CliError is one red line and status 1, never a traceback."""
    try:
        if options.command == "sessions":
            return await list_sessions(options)
        if options.prompt is not None:
            return await ask_once(options, options.prompt)
        return await interactive(options)
    except CliError as failure:
        print(f"codelab: {failure.code}: {failure.message}", file=sys.stderr)
        return 1
