"""Command line and environment -> ``Options`` (the one place codelab reads either)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clients.cli.commands import DEFAULT_TIMEOUT

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Options:
    """What one codelab run does."""

    url: str
    """The gateway (``CODELAB_URL``)."""
    token: str | None
    """A gateway API key (``CODELAB_API_KEY``) when the gateway sets ``GATEWAY_API_KEYS``."""
    workspace: Path
    """The folder the tools may touch: where codelab started, or ``-C DIR``."""
    command: str = "chat"
    """chat | sessions."""
    session: str | None = None
    prompt: str | None = None
    json: bool = False
    agent: str | None = None
    command_timeout: float = DEFAULT_TIMEOUT


def parse(argv: Sequence[str], environ: Mapping[str, str], cwd: Path) -> Options:
    """Options from ``argv`` (without the program name); argparse exits on bad input."""
    parser = argparse.ArgumentParser(
        prog="codelab",
        description="The CodeLab terminal IDE: chat with the runtime, which uses this folder's "
        "files through tools run here. `codelab sessions` lists your sessions.",
    )
    parser.add_argument("command", nargs="?", choices=("chat", "sessions"), default="chat")
    parser.add_argument("--url", default=environ.get("CODELAB_URL") or DEFAULT_URL)
    parser.add_argument("--api-key", default=environ.get("CODELAB_API_KEY") or None)
    parser.add_argument("-C", dest="workspace", type=Path, default=cwd, help="the project folder")
    parser.add_argument("--session", help="resume this session")
    parser.add_argument("-p", "--prompt", help="ask once, print the answer and exit")
    parser.add_argument("--json", action="store_true", help="with -p: events as JSON lines")
    parser.add_argument("--agent", help="skip routing: this agent answers (coder, ask, ...)")
    parser.add_argument(
        "--command-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds a command may run before it is killed",
    )
    args = parser.parse_args(list(argv))
    if args.json and args.prompt is None and args.command == "chat":
        parser.error("--json goes with -p (or with `codelab sessions`)")
    if not args.workspace.is_dir():
        parser.error(f"-C {args.workspace}: not a directory")
    return Options(
        url=args.url,
        token=args.api_key,
        workspace=args.workspace,
        command=args.command,
        session=args.session,
        prompt=args.prompt,
        json=args.json,
        agent=args.agent,
        command_timeout=args.command_timeout,
    )
