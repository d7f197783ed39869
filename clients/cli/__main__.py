"""``codelab`` (the console script) and ``python -m clients.cli``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from clients.cli.app import run
from clients.cli.options import parse


def main() -> int:
    options = parse(sys.argv[1:], os.environ, Path.cwd())
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
